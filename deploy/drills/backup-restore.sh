#!/bin/bash
# The backup and restore drill of deploy/README.md, in a temp folder: the
# server runs by hand on a free loopback port (the first start's, kept for
# the restarts) instead of under systemd, and the folder stands for
# /var/lib/evi-server. Needs curl, sqlite3, tar.
#   EVI_SERVER=/usr/local/bin/evi-server EVI=evi deploy/drills/backup-restore.sh
set -euo pipefail
SERVER=${EVI_SERVER:-/usr/local/bin/evi-server}
EVI=${EVI:-evi}
. "$(dirname "$0")/lib.sh"
D=$(mktemp -d)
trap 'kill ${SPID:-} 2>/dev/null || true; rm -rf "$D"' EXIT
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
echo "== first start, invite, first device, push"
start
CODE=$($SERVER invite --data $DATA 2>/dev/null)
export EVI_HOME=$D/laptop
$EVI sync init --server $URL --user alice --device laptop --invite "$CODE" 2>&1 | tail -1
mkdir -p $EVI_HOME/transcripts/2026-12-01
printf '{"role":"user","content":"before the backup 1"}\n{"role":"assistant","content":"before the backup 2"}\n' > $EVI_HOME/transcripts/2026-12-01/s1.jsonl
$EVI sync push 2>&1 | tail -1
$EVI sync key export -o $D/key.age 2>/dev/null
echo "== backup: stop, copy the whole folder, start"
stop
tar -C $D/var/lib -cpf $D/backup/evi-server.tar evi-server
start
echo "== a push after the backup (the restore will lose it)"
printf '{"role":"user","content":"after the backup"}\n' >> $EVI_HOME/transcripts/2026-12-01/s1.jsonl
$EVI sync push 2>&1 | tail -1
echo "== disaster: the data folder is gone"
stop
rm -rf $DATA
echo "== restore: untar, check, start"
tar -C $D/var/lib -xpf $D/backup/evi-server.tar
stat -c '%A %n' $DATA $DATA/evi-server.sqlite3
sqlite3 $DATA/evi-server.sqlite3 'PRAGMA integrity_check; SELECT COUNT(*) AS users FROM users; SELECT COUNT(*) AS records FROM records;'
start
curl -s $URL/healthz; echo
echo "== the laptop notices the server went back, and mends it"
$EVI sync status 2>&1 | grep -i "backwards" || true
$EVI sync pull --all 2>&1 | tail -1
$EVI sync push 2>&1 | tail -1
echo "== a new device pulls everything, the push after the backup included"
export EVI_HOME=$D/desktop
$EVI sync key import $D/key.age 2>&1 | tail -1
$EVI sync login --server $URL --user alice --device desktop 2>&1 | tail -1
$EVI sync pull 2>&1 | tail -1
cat $D/desktop/transcripts/2026-12-01/*.jsonl
cmp $D/laptop/transcripts/2026-12-01/s1.jsonl $D/desktop/transcripts/2026-12-01/*.jsonl
echo "desktop == laptop: same bytes"
stop
echo "server log lines: $(grep -c . $D/server.log)"
echo "drill passed"

