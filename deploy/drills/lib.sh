# Sourced by the drills. start_server OUT ERR ARGS... runs $SERVER with ARGS
# in the background (SPID) and waits for its own first stdout line,
# "listening on HOST:PORT" (ADDR): printed once that process has bound the
# port and opened its data, so what answers on ADDR is this server, not one
# left on the port by another run (whose /healthz would answer all the
# same). ARGS should hold `--listen 127.0.0.1:0` the first time (a free
# port) and the port it got after (devices keep their server URL).
start_server() {
  local out=$1 err=$2
  shift 2
  : >"$out"
  "$SERVER" "$@" >"$out" 2>>"$err" &
  SPID=$!
  ADDR=
  for _ in $(seq 300); do
    ADDR=$(sed -n '1s/^listening on //p' "$out")
    [ -n "$ADDR" ] && break
    if ! kill -0 $SPID 2>/dev/null; then
      echo "the server did not start:"; tail -n 5 "$err"; exit 1
    fi
    sleep 0.1
  done
  [ -n "$ADDR" ] || { echo "the server did not say where it listens"; tail -n 5 "$err"; exit 1; }
  [ "$(curl -s "http://$ADDR/healthz")" = ok ] || { echo "no /healthz on $ADDR"; exit 1; }
}

# A port free on loopback now, for a program that cannot report the one it
# got (Caddy, s3s-fs); whether that program then holds it is checked by the
# caller.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
