#!/bin/bash
# deploy/Caddyfile in front of the installed evi-server, on this machine:
# the shipped site block with its name swapped for localhost and Caddy's own
# CA (no public DNS here), plus a plain-HTTP copy of it for evi (whose
# built-in roots do not include that CA), and its upstream swapped for the
# free loopback port the drill's server got.
# Needs caddy, curl and python3; every port is a free one on loopback.
#   EVI_SERVER=/usr/local/bin/evi-server EVI=evi deploy/drills/caddy.sh
set -euo pipefail
SERVER=${EVI_SERVER:-/usr/local/bin/evi-server}
EVI=${EVI:-evi}
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/drills/lib.sh"
D=$(mktemp -d)
DATA=$D/data
trap 'kill ${CPID:-} ${SPID:-} 2>/dev/null || true; rm -rf "$D"' EXIT
export XDG_DATA_HOME=$D/caddy-home XDG_CONFIG_HOME=$D/caddy-home
start_server $D/out.log $D/server2.log --listen 127.0.0.1:0 --data $DATA --registration invite --trust-forwarded-for
TLS_PORT=$(free_port)
HTTP_PORT=$(free_port)
grep -q '^	reverse_proxy 127.0.0.1:8787 {' $HERE/Caddyfile
site=$(sed -n '/^sync.example.com {/,/^}/p' $HERE/Caddyfile | sed '1d;$d' | sed "s/reverse_proxy 127.0.0.1:8787/reverse_proxy $ADDR/")
cat > $D/Caddyfile <<C
{
	admin off
	skip_install_trust
}
localhost:$TLS_PORT {
	tls internal
$site
}
http://127.0.0.1:$HTTP_PORT {
$site
}
C
caddy validate --config $D/Caddyfile --adapter caddyfile 2>/dev/null | tail -1
caddy run --config $D/Caddyfile --adapter caddyfile 2>$D/caddy.log &
CPID=$!
# Up once /healthz answers over TLS verified by this Caddy's own new CA:
# no other server on the port can pass that.
CA=$D/caddy-home/caddy/pki/authorities/local/root.crt
for _ in $(seq 100); do
  [ -f $CA ] && [ "$(curl -s --cacert $CA https://localhost:$TLS_PORT/healthz)" = ok ] && break
  kill -0 $CPID 2>/dev/null || { echo "caddy did not start:"; tail -n 5 $D/caddy.log; exit 1; }
  sleep 0.2
done
[ "$(curl -s --cacert $CA https://localhost:$TLS_PORT/healthz)" = ok ] || { echo "caddy did not answer"; exit 1; }
echo "== TLS through Caddy"
curl -s --cacert $CA -w ' (HTTP %{http_code}, %{ssl_verify_result} = TLS verified)\n' https://localhost:$TLS_PORT/healthz
CODE=$($SERVER invite --data $DATA 2>/dev/null)
curl -s --cacert $CA -H 'Content-Type: application/json' \
  -d "{\"user\":\"bob\",\"password\":\"drill password 2\",\"device\":\"curl\",\"invite\":\"$CODE\"}" \
  -o /dev/null -w 'register over TLS: HTTP %{http_code}\n' https://localhost:$TLS_PORT/api/v1/register
echo "== the limiter sees the client's address, not Caddy's: 70 logins with made-up X-Forwarded-For, 60 a minute allowed per address"
for i in $(seq 70); do curl -s --cacert $CA -H 'Content-Type: application/json' -H 'X-Forwarded-For: 198.51.100.'$i \
  -d "{\"user\":\"nobody$i\",\"password\":\"x\",\"device\":\"d\"}" -o /dev/null -w '%{http_code}\n' https://localhost:$TLS_PORT/api/v1/login; done | sort | uniq -c
echo "== evi through the same proxy block (plain HTTP copy)"
export EVI_HOME=$D/via-caddy EVI_SYNC_PASSWORD='drill password 3' EVI_KEY_PASSPHRASE='drill passphrase'
CODE=$($SERVER invite --data $DATA 2>/dev/null)
$EVI sync init --server http://127.0.0.1:$HTTP_PORT --user carol --device laptop --invite "$CODE" 2>&1 | tail -1
mkdir -p $EVI_HOME/transcripts/2026-12-01
{ printf "{\"role\":\"tool\",\"content\":\""; head -c 3000000 /dev/urandom | base64 -w0; printf "\"}\n"; } > $EVI_HOME/transcripts/2026-12-01/big.jsonl
$EVI sync push 2>&1 | tail -1
$EVI sync status 2>&1 | head -3
$EVI sync pull 2>&1 | tail -1
grep -c "" $D/server2.log | sed "s/^/server log lines: /"
echo "drill passed"
