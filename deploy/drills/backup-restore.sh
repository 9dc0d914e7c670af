#!/bin/bash
# The backup and restore drill of deploy/README.md, in a temp folder: the
# server runs by hand on a free loopback port (the first start's, kept for
# the restarts) instead of under systemd, and the folder stands for
# /var/lib/evi-server. The backup is taken with the server running and a
# device pushing a session after another meanwhile. Needs curl, sqlite3.
#   EVI_SERVER=/usr/local/bin/evi-server EVI=evi deploy/drills/backup-restore.sh
set -euo pipefail
SERVER=${EVI_SERVER:-/usr/local/bin/evi-server}
EVI=${EVI:-evi}
. "$(dirname "$0")/lib.sh"
D=$(mktemp -d)
trap 'touch $D/stop; kill ${SPID:-} ${PUSHER:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$D"' EXIT
DATA=$D/var/lib/evi-server
mkdir -p $D/var/lib $D/backup
export EVI_SYNC_PASSWORD='drill password 1' EVI_KEY_PASSPHRASE='drill passphrase'
PORT=0
start() {
  start_server $D/out.log $D/server.log --listen 127.0.0.1:$PORT --data $DATA --registration invite
  PORT=${ADDR##*:}
  URL=http://$ADDR
}
stop() { kill -TERM $SPID; wait $SPID || true; }
DAY=$D/laptop/transcripts/2026-12-01
echo "== first start, invite, first device, push"
start
CODE=$($SERVER invite --data $DATA 2>/dev/null)
export EVI_HOME=$D/laptop
$EVI sync init --server $URL --user alice --device laptop --invite "$CODE" 2>&1 | tail -1
mkdir -p $DAY
printf '{"role":"user","content":"before the backup 1"}\n{"role":"assistant","content":"before the backup 2"}\n' > $DAY/s1.jsonl
$EVI sync push 2>&1 | tail -1
$EVI sync key export -o $D/key.age 2>/dev/null
echo "== backup, with the server running and the laptop pushing a session after another"
(
  n=0
  while [ ! -e $D/stop ]; do
    n=$((n + 1))
    printf '{"role":"user","content":"pushed while the backup ran %d"}\n' $n > $DAY/during-$n.jsonl
    $EVI sync push >/dev/null 2>&1
    echo $n > $D/pushed
  done
) &
PUSHER=$!
until [ -e $D/pushed ]; do sleep 0.1; done
echo "sessions pushed before the backup began: $(cat $D/pushed)"
$SERVER backup --data $DATA -o $D/backup/evi-server.tar
echo "sessions pushed when it ended: $(cat $D/pushed)"
touch $D/stop
wait $PUSHER
PUSHER=
stat -c '%a %s %n' $D/backup/evi-server.tar | sed "s|$D/||"
echo "sessions the laptop pushed in all: $(cat $D/pushed)"
echo "== a push after the backup (the restore will lose it)"
printf '{"role":"user","content":"after the backup"}\n' >> $DAY/s1.jsonl
$EVI sync push 2>&1 | tail -1
echo "== disaster: the data folder is gone"
stop
rm -rf $DATA
echo "== restore, check, start"
$SERVER restore --data $DATA -i $D/backup/evi-server.tar
stat -c '%A %n' $DATA $DATA/evi-server.sqlite3 | sed "s|$D/||"
sqlite3 $DATA/evi-server.sqlite3 'PRAGMA integrity_check; SELECT COUNT(*) AS users FROM users; SELECT COUNT(*) AS records FROM records;'
start
curl -s $URL/healthz; echo
echo "== a new device pulls the backup: the sessions of one instant, byte for byte"
export EVI_HOME=$D/desktop
$EVI sync key import $D/key.age 2>&1 | tail -1
$EVI sync login --server $URL --user alice --device desktop 2>&1 | tail -1
$EVI sync pull 2>&1 | tail -1
GOT=$(ls $D/desktop/transcripts/2026-12-01 | grep -c '^during-' || true)
echo "sessions pushed during the backup that it holds: $GOT"
for n in $(seq 1 $GOT); do
  cmp $DAY/during-$n.jsonl $D/desktop/transcripts/2026-12-01/during-$n.jsonl
done
[ ! -e $D/desktop/transcripts/2026-12-01/during-$((GOT + 1)).jsonl ]
[ "$(wc -l < $D/desktop/transcripts/2026-12-01/s1.jsonl)" = 2 ]
echo "desktop: s1 (2 lines) and during-1..$GOT, each the laptop's bytes; none after"
echo "== the laptop notices the server went back, and mends it"
export EVI_HOME=$D/laptop
$EVI sync status 2>&1 | grep -i "backwards" || true
$EVI sync pull --all 2>&1 | tail -1
$EVI sync push 2>&1 | tail -1
echo "== the desktop pulls again: everything, the push after the backup included"
export EVI_HOME=$D/desktop
$EVI sync pull 2>&1 | tail -1
diff -r $D/laptop/transcripts $D/desktop/transcripts
echo "desktop == laptop: same bytes ($(ls $DAY | wc -l) sessions)"
stop
echo "server log lines: $(grep -c . $D/server.log)"
echo "drill passed"
