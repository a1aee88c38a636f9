# Shell helpers for scripts that start one sluiced on free loopback ports
# (scripts/examples.sh, scripts/image.sh). Source it; it needs a die
# function from the caller.

# http_status HOST:PORT PATH prints the HTTP status code of a GET, or
# nothing when the connection fails (bash's /dev/tcp: no curl needed).
http_status() {
  local host=${1%:*} port=${1##*:} line=""
  { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 0
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$1" >&3
  IFS= read -r -t 5 line <&3 || true
  exec 3<&-
  line=${line#* }
  echo "${line%% *}"
}

# wait_ready PID LOG waits (30 s at most) until the sluiced whose output
# goes to LOG has printed its start line and its /readyz answers 200, and
# sets addr (its client gRPC address) and http (its HTTP address) from the
# start line. It dies if PID exits first.
wait_ready() {
  local pid=$1 log=$2 started deadline=$((SECONDS + 30))
  addr="" http=""
  while :; do
    kill -0 "$pid" 2>/dev/null || die "sluiced exited during start-up"
    if [ -z "$addr" ]; then
      started=$(grep -m1 'msg="sluice node started"' "$log" || true)
      if [ -n "$started" ]; then
        addr=$(sed -n 's/.* listen=\([^ ]*\).*/\1/p' <<<"$started")
        http=$(sed -n 's/.* http=\([^ ]*\).*/\1/p' <<<"$started")
        [ -n "$addr" ] && [ -n "$http" ] || die "no listen= and http= address in sluiced's start line: $started"
      fi
    fi
    if [ -n "$http" ] && [ "$(http_status "$http" /readyz)" = 200 ]; then
      return 0
    fi
    [ $SECONDS -lt $deadline ] || die "sluiced not ready after 30 s (gRPC ${addr:-?}, HTTP ${http:-?})"
    sleep 0.1
  done
}
