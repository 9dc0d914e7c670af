#!/bin/bash
# The backup and restore drill of a scaled-out server (deploy/README.md,
# "Backups of a scaled-out server"): Postgres plus an S3-compatible bucket
# (s3s-fs on loopback stands for the store), backed up with pg_dump and
# `aws s3 sync`, everything dropped, restored with pg_restore and
# `aws s3 sync` back, and devices that push and pull on with nothing lost.
# Both the server and s3s-fs run on free loopback ports. Needs psql,
# pg_dump, pg_restore, aws (the AWS CLI), s3s-fs, python3.
#   PG=postgres://postgres@127.0.0.1:5432/test EVI_SERVER=… EVI=… EVI_GEN_HOME=… \
#     S3S_FS=~/.cargo/bin/s3s-fs deploy/drills/pg-restore.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SERVER=${EVI_SERVER:-/usr/local/bin/evi-server}
EVI=${EVI:-evi}
GEN=${EVI_GEN_HOME:-evi-gen-home}
S3S=${S3S_FS:-s3s-fs}
PG=${PG:-postgres://postgres@127.0.0.1:5432/test}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$(mktemp -d)
DB=evi_drill_$$
URL=${PG%/*}/$DB
cleanup() {
  kill ${SPID:-} ${S3PID:-} 2>/dev/null || true
  psql -q "$PG" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
export EVI_SYNC_PASSWORD='drill password 1' EVI_KEY_PASSPHRASE='drill passphrase'
export AWS_ACCESS_KEY_ID=drill-key AWS_SECRET_ACCESS_KEY=drill-secret-key-123 AWS_REGION=us-east-1
S3_PORT=$(free_port)
export AWS_ENDPOINT_URL=http://127.0.0.1:$S3_PORT AWS_ALLOW_HTTP=true
mkdir -p $D/s3/evi-sync $D/backup $D/data
$S3S --host 127.0.0.1 --port $S3_PORT --access-key $AWS_ACCESS_KEY_ID --secret-key $AWS_SECRET_ACCESS_KEY $D/s3 >/dev/null 2>$D/s3.log &
S3PID=$!
# The store is this drill's s3s-fs once an object put through the port
# lands in this drill's folder: no other server on the port can do that.
echo "$D" > $D/token
for _ in $(seq 100); do
  aws s3 cp --only-show-errors $D/token s3://evi-sync/drill-token 2>/dev/null && cmp -s $D/token $D/s3/evi-sync/drill-token && break
  kill -0 $S3PID 2>/dev/null || { echo "s3s-fs did not start:"; tail -n 5 $D/s3.log; exit 1; }
  sleep 0.1
done
cmp -s $D/token $D/s3/evi-sync/drill-token || { echo "the store on port $S3_PORT is not this drill's"; exit 1; }
aws s3 rm --only-show-errors s3://evi-sync/drill-token
PORT=0
start() {
  start_server $D/out.log $D/server.log --listen 127.0.0.1:$PORT --data $D/data --registration invite \
    --database "$URL" --store s3://evi-sync/v1
  PORT=${ADDR##*:}
  SURL=http://$ADDR
}
stop() { kill -TERM $SPID; wait $SPID || true; }
counts() {
  psql -qAt "$URL" -c "SELECT 'users ' || count(*) FROM users UNION ALL SELECT 'records ' || count(*) FROM records
    UNION ALL SELECT 'entries ' || count(*) FROM entries UNION ALL SELECT 'blobs ' || count(*) FROM blobs" | paste -sd' '
}
objects() { aws s3 ls --recursive s3://evi-sync/v1/ | awk '{n++; s += $3} END {printf "%d objects, %d bytes\n", n, s}'; }

echo "== an empty database, an empty bucket; the first code, the first start"
psql -q "$PG" -c "CREATE DATABASE $DB"
CODE=$($SERVER invite --data $D/data --database "$URL" 2>/dev/null)
start
echo "== the laptop pushes a history (transcripts and checkpoint blobs)"
export EVI_HOME=$D/laptop
$GEN $EVI_HOME --sessions 40 --total-mb 4 --big-mb 1 >/dev/null
rm -f $EVI_HOME/gen-home.txt
python3 "$ROOT/bench/add_journal.py" $EVI_HOME/checkpoints 4000000 >/dev/null
$EVI sync init --server $SURL --user alice --device laptop --invite "$CODE" 2>&1 | tail -1
$EVI sync push 2>&1 | tail -1
$EVI sync key export -o $D/key.age 2>/dev/null
echo "server: $(counts); bucket: $(objects)"

echo "== backup: pg_dump first, then the bucket (the server keeps running)"
pg_dump -Fc -f $D/backup/evi.dump "$URL"
aws s3 sync --only-show-errors s3://evi-sync/v1 $D/backup/bucket
echo "dump $(stat -c %s $D/backup/evi.dump) bytes; bucket copy $(find $D/backup/bucket -type f -printf '%s\n' | awk '{n++; s += $1} END {printf "%d files, %d bytes", n, s}')"

echo "== a push after the backup (the restore will lose it)"
mkdir -p $EVI_HOME/transcripts/2026-12-01
printf '{"role":"user","content":"after the backup"}\n' > $EVI_HOME/transcripts/2026-12-01/after.jsonl
$EVI sync push 2>&1 | tail -1

echo "== disaster: the database and every object are gone"
stop
psql -q "$PG" -c "DROP DATABASE $DB WITH (FORCE)"
aws s3 rm --only-show-errors --recursive s3://evi-sync/v1/
echo "bucket: $(objects)"

echo "== restore: an empty database, pg_restore, the bucket copied back, start"
psql -q "$PG" -c "CREATE DATABASE $DB"
pg_restore --no-owner -d "$URL" $D/backup/evi.dump
aws s3 sync --only-show-errors $D/backup/bucket s3://evi-sync/v1
echo "server: $(counts); bucket: $(objects)"
start
curl -s $SURL/healthz; echo

echo "== the laptop notices the server went back, and mends it"
$EVI sync status 2>&1 | grep -i "backwards" || true
$EVI sync pull --all 2>&1 | tail -1
$EVI sync push 2>&1 | tail -1
echo "server: $(counts)"

echo "== a new device pulls everything, the push after the backup included"
export EVI_HOME=$D/desktop
$EVI sync key import $D/key.age 2>&1 | tail -1
$EVI sync login --server $SURL --user alice --device desktop 2>&1 | tail -1
$EVI sync pull 2>&1 | tail -1
diff -r $D/laptop/transcripts $D/desktop/transcripts
echo "desktop transcripts == laptop's: $(find $D/desktop/transcripts -type f | wc -l) files, same bytes"
diff -r $D/laptop/checkpoints/blobs $D/desktop/checkpoints/blobs
echo "desktop checkpoint blobs == laptop's: $(find $D/desktop/checkpoints/blobs -type f | wc -l) blobs, same bytes"
stop
echo "drill passed"
