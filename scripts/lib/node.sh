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

# descendants PID prints the pids of PID's descendants, depth first.
descendants() {
  local c
  for c in $(pgrep -P "$1" || true); do
    echo "$c"
    descendants "$c"
  done
}

# stop_process PID NAME stops PID and its descendants (a sluiced started
# under `buildah run` is one): SIGTERM, then SIGKILL to whatever still runs
# after 30 s (a node's graceful shutdown is bounded well below that).
stop_process() {
  local pid=$1 name=$2 all p
  kill -0 "$pid" 2>/dev/null || return 0
  all="$pid $(descendants "$pid")"
  kill -TERM $all 2>/dev/null || true
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  for p in $all; do
    if kill -0 "$p" 2>/dev/null; then
      echo "$name (pid $p) still running after 30 s: SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  wait "$pid" 2>/dev/null || true
}

# finish_work RC LABEL WORK LOG ends a script's run: on failure the last
# lines of LOG, then WORK removed (kept with KEEP=1).
finish_work() {
  local rc=$1 label=$2 work=$3 log=$4
  if [ "$rc" -ne 0 ] && [ -f "$log" ]; then
    echo "$label: last lines of $log:" >&2
    tail -n 30 "$log" >&2 || true
  fi
  if [ "${KEEP:-}" = 1 ]; then
    echo "$label: kept $work"
  else
    rm -rf "$work"
  fi
}
