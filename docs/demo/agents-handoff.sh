#!/usr/bin/env bash
# Hand a Claude Code session and a Codex session from one device to another
# whose project lives at another path: two homes, one real evi-server.
#
#   cargo build --release --workspace && docs/demo/agents-handoff.sh
#
# Everything lives in a temporary folder; the sessions are the e2e fixtures
# (shapes written by the agents' own tools, tests/tests/e2e/fixtures/agents).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${EVI_BIN_DIR:-$root/target/release}
fixtures=$root/tests/tests/e2e/fixtures/agents
T=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$T"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/evi-server" --data "$T/server" --listen "127.0.0.1:$port" --registration open \
  2>"$T/server.log" &
server=$!
url=http://127.0.0.1:$port
for _ in $(seq 50); do curl -fs "$url/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

proj_a=$T/home/a/proj
proj_b=$T/srv/b/proj
mkdir -p "$proj_a" "$proj_b"
folder() { printf '%s' "$1" | sed 's/[^A-Za-z0-9]/-/g'; }

# Device A: a Claude Code and a Codex session of the project at proj_a.
export EVI_SYNC_PASSWORD="demo password, not a real one" EVI_KEY_PASSPHRASE="demo passphrase"
dev() { local d=$1; shift; ( cd "$T/$d" && HOME="$T/$d" EVI_HOME="$T/$d/evi" TZ=UTC COLUMNS=100 NO_COLOR=1 "$bin/evi" "$@" ); }
show() { printf '\n$ (%s) evi %s\n' "$1" "${*:2}"; dev "$@"; }
for d in a b; do
  mkdir -p "$T/$d/evi"
  cat >"$T/$d/evi/config.toml" <<TOML
[agents]
claude-code = true
codex = true
claude-code-dir = "$T/$d/claude"
codex-dir = "$T/$d/codex"
TOML
done
printf '[paths]\n"%s" = "%s"\n' "$proj_a" "$proj_b" >>"$T/b/evi/config.toml"
cc=$T/a/claude/projects/$(folder "$proj_a")
mkdir -p "$cc" "$T/a/codex/sessions/2026/01/19"
sed "s|@PROJECT@|$proj_a|g" "$fixtures/claude-code-tools.jsonl" >"$cc/d284f444-9e56-4318-a472-bc18481b7793.jsonl"
sed "s|@PROJECT@|$proj_a|g" "$fixtures/codex-rollout.jsonl" \
  >"$T/a/codex/sessions/2026/01/19/rollout-2026-01-19T15-21-26-019bd6d8-b99b-7eb1-847c-87c3da10673a.jsonl"

echo "# project on A: $proj_a"
echo "# project on B: $proj_b ([paths] maps A's to it)"
show a sync init --server "$url" --user demo --device laptop
show a sync push
# B joins with a short code: no key file, no password typed on B.
dev a sync pair --yes --json >"$T/pair.json" 2>"$T/pair.err" &
pair=$!
for _ in $(seq 100); do grep -q '"code"' "$T/pair.json" 2>/dev/null && break; sleep 0.1; done
code=$(head -1 "$T/pair.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["code"])')
printf '\n$ (a) evi sync pair --yes   # prints the code: %s\n' "$code"
( unset EVI_SYNC_PASSWORD EVI_KEY_PASSPHRASE; show b sync join "$code" --server "$url" --name desktop )
wait $pair
show b sync pull
show b sessions list --days 3650
show b sessions handoff d284f444 --no-push
show b sessions handoff 019bd6d8 --no-push
show b sessions handoff d284f444 --no-push --json
show b sessions resume d284f444 --print
printf '\n# where B put them:\n'
(cd "$T/b" && find claude codex -name '*.jsonl' | sort)
printf '\n# the cwd inside B'"'"'s Claude Code lines:\n'
grep -o '"cwd":"[^"]*"' "$T/b/claude/projects/$(folder "$proj_b")/d284f444-9e56-4318-a472-bc18481b7793.jsonl" | sort -u
