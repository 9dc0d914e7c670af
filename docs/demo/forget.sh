#!/usr/bin/env bash
# Forget a session on three devices: three homes (A, B, C), one real
# evi-server on SQLite, and the server's bytes before and after.
#
#   cargo build --release --workspace && docs/demo/forget.sh
#
# Everything lives in a temporary folder and goes when the script ends.
set -euo pipefail
. "$(dirname "$0")/common.sh"
# The records the server holds, as its API shows them to A.
records() {
  curl -fs -H "Authorization: Bearer $(cat "$T/a/evi/sync/token")" "$url/api/v1/records?after=0&limit=1000"
}
bytes() {
  printf '  data folder (du -b): %s bytes\n' "$(du -sb "$T/server" | cut -f1)"
  printf '  body packs:          %s bytes in %s packs\n' \
    "$(find "$T/server/bodies" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')" \
    "$(find "$T/server/bodies" -type f | wc -l)"
}

for d in a b c; do mkdir -p "$T/$d/evi"; done
day=$(date -u +%F)
mkdir -p "$T/a/evi/transcripts/$day"
gone=plan-secret-0001
for i in $(seq 1 40); do
  printf '{"role":"user","ts":"%sT09:%02d:00Z","content":"the secret plan, part %s: %s"}\n' \
    "$day" "$i" "$i" "$(head -c 600 /dev/urandom | base64 -w0)"
done >"$T/a/evi/transcripts/$day/$gone.jsonl"
printf '{"role":"user","ts":"%sT10:00:00Z","content":"an ordinary session"}\n' "$day" \
  >"$T/a/evi/transcripts/$day/ordinary-0002.jsonl"

show a sync init --server "$url" --user demo --device laptop
show a sync push
pair b desktop
pair c travel
show b sync pull
show c sync pull
show c sessions list

records >"$T/before.json"
printf '\n# the server before the forget:\n'
bytes

show a sessions forget --yes "$gone"
# B pulls at once (`evi sync watch` would, within a second).
show b sync pull
show b sessions list
# C was away; it pulls later.
sleep 2
show c sync pull
show c sessions list
printf '\n$ (c) ls sync/trash/\n'
ls "$T/c/evi/sync/trash/"

# The compaction runs in the background: wait until it has rewritten the
# packs (the forgotten bodies gone from them).
records >"$T/after.json"
python3 - "$T" <<'PY' >"$T/needles"
import base64, json, sys
t = sys.argv[1]
after = json.load(open(f"{t}/after.json"))["records"]
stream = next(r["stream"] for r in after if r["kind"] == "forget")
print(stream)
for r in json.load(open(f"{t}/before.json"))["records"]:
    if r["stream"] == stream:
        b = base64.b64decode(r["ciphertext"])
        print(b[len(b) // 2:len(b) // 2 + 48].hex())
PY
stream=$(head -1 "$T/needles")
held() {
  python3 - "$T/server" "$T/needles" <<'PY'
import os, sys
needles = [bytes.fromhex(l) for l in open(sys.argv[2]).read().split()[1:]]
n = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        data = open(os.path.join(d, f), "rb").read()
        n += sum(data.count(x) for x in needles)
print(n)
PY
}
for _ in $(seq 100); do [ "$(held)" = 0 ] && break; sleep 0.1; done

printf '\n# the server after the forget and its compaction:\n'
bytes
printf '\n# the forgotten session'"'"'s keyed stream id: %s\n' "$stream"
db=$T/server/evi-server.sqlite3
printf '$ sqlite3 evi-server.sqlite3 "select seq, kind from records where stream = '"'"'<id>'"'"'"\n'
sqlite3 "$db" "select seq, kind from records where stream = '$stream'"
printf '$ sqlite3 evi-server.sqlite3 "select count(*) from records where stream = '"'"'<id>'"'"' and kind <> '"'"'forget'"'"'"\n'
sqlite3 "$db" "select count(*) from records where stream = '$stream' and kind <> 'forget'"
printf '\n# pieces (48 bytes from the middle) of its %s record bodies, counted in every file of the data folder:\n' \
  "$(($(wc -l <"$T/needles") - 1))"
held
printf '\n$ grep -rac <keyed stream id> over the data folder (files that hold it: the tombstone row, the forgotten-streams row)\n'
grep -rac "$stream" "$T/server" | grep -v ':0$' | sed "s|$T/||" || echo "none"
