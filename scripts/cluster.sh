#!/usr/bin/env bash
# A local three-node Sluice cluster for trying things out: three combined
# (controller and broker) sluiced processes on 127.0.0.1, data and logs
# under one directory, left running in the background.
#
#   make cluster            # or scripts/cluster.sh start
#   make cluster-stop       # or scripts/cluster.sh stop (SIGTERM, then waits)
#   scripts/cluster.sh start-node I   # (re)starts node I alone, as start
#                                     # does, e.g. after it was killed
#   scripts/cluster.sh kill-node I    # SIGKILLs node I and waits until it
#                                     # is gone (its ports and data dir free)
#
# Node i (1..3) uses ports BASE_PORT+10*i .. +5: client gRPC, Raft, gossip,
# HTTP, internal gRPC, Kafka protocol (9510-9515, 9520-9525, 9530-9535 by
# default, apart from `make run`'s 9400 and 9092). Its data is in DIR/data-i, its output in DIR/node-i.log, its
# process id in DIR/node-i.pid. A second start with the same DIR reuses the
# data (the cluster comes back as it was).
#
# New topics that name no replication factor or min.insync.replicas get 3
# and 2 (--default-replication-factor, --default-min-insync-replicas), as in
# the Kubernetes manifests: a write acknowledged with acks=all survives
# losing a node.
#
# Environment: DIR (sluice-cluster), BASE_PORT (9500), BIN (bin: where the
# binaries are built), GO (go), ARGS (extra sluiced flags for every node;
# they win over the ones above),
# GODEBUG (the nodes' Go runtime settings; default schedtrace=2147483647,
# which keeps the runtime's monitor thread off the deep sleep that cost a
# futex wake-up per request: docs/design.md decision 47),
# NODE_GOMAXPROCS (each node's GOMAXPROCS; default: the machine's CPUs
# shared out, max(1, nproc / 3) — three Go runtimes each sized for the
# whole machine spin and hand work between more threads than there are
# cores; docs/operations.md, "Several nodes on one machine").
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DIR:-sluice-cluster}
BASE_PORT=${BASE_PORT:-9500}
BIN=${BIN:-bin}
GO=${GO:-go}
NODES=3
NODE_GOMAXPROCS=${NODE_GOMAXPROCS:-$(( $(nproc) / NODES > 1 ? $(nproc) / NODES : 1 ))}
# Decision 47 (docs/design.md): set where the nodes are started, not by sluiced.
NODE_GODEBUG=${GODEBUG:-schedtrace=2147483647}

port() { echo $((BASE_PORT + 10 * $1 + $2)); }

# alive PID: whether PID still runs. A process SIGKILLed a moment ago may
# still be exiting, and once exited stays a zombie until whoever adopted
# it reaps it; `kill -0` answers yes for both. A zombie holds no port and
# no lock: it counts as gone.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0 # no /proc: kill -0's word
  stat=${stat##*) }
  [ "${stat:0:1}" != Z ]
}

# gone PID SECONDS: waits until PID no longer runs; fails if it still does.
gone() {
  local i
  for i in $(seq 1 $(($2 * 10))); do
    alive "$1" || return 0
    sleep 0.1
  done
  ! alive "$1"
}

stop() {
  local any=0
  for i in $(seq 1 $NODES); do
    local pidf="$DIR/node-$i.pid"
    [ -f "$pidf" ] || continue
    local pid
    pid=$(cat "$pidf")
    if alive "$pid"; then
      kill -TERM "$pid" && any=1
    fi
  done
  # Graceful shutdown hands leaderships off; sluiced bounds it at 30 s.
  for i in $(seq 1 $NODES); do
    local pidf="$DIR/node-$i.pid"
    [ -f "$pidf" ] || continue
    local pid
    pid=$(cat "$pidf")
    if ! gone "$pid" 35; then
      echo "node $i (pid $pid) still running after 35 s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidf"
  done
  [ $any = 1 ] && echo "stopped the cluster in $DIR (data kept; rm -rf $DIR removes it)" || echo "no node of $DIR was running"
}

# launch I starts node I in the background (its output appended to
# DIR/node-I.log, its process id in DIR/node-I.pid).
launch() {
  local i=$1 voters="" join=""
  for j in $(seq 1 $NODES); do
    voters="$voters${voters:+,}$j@127.0.0.1:$(port "$j" 1)"
    join="$join${join:+,}127.0.0.1:$(port "$j" 2)"
  done
  # shellcheck disable=SC2086 # ARGS is a list of flags
  env -u SLUICE_DATA_DIR GOMAXPROCS="$NODE_GOMAXPROCS" GODEBUG="$NODE_GODEBUG" "$BIN/sluiced" --node-id "$i" --data-dir "$DIR/data-$i" \
    --listen "127.0.0.1:$(port "$i" 0)" --raft-listen "127.0.0.1:$(port "$i" 1)" \
    --gossip-listen "127.0.0.1:$(port "$i" 2)" --http-listen "127.0.0.1:$(port "$i" 3)" \
    --internal-listen "127.0.0.1:$(port "$i" 4)" --kafka-listen "127.0.0.1:$(port "$i" 5)" \
    --controller-voters "$voters" --join "$join" \
    --default-replication-factor 3 --default-min-insync-replicas 2 ${ARGS:-} \
    >>"$DIR/node-$i.log" 2>&1 &
  echo $! >"$DIR/node-$i.pid"
}

# ready I waits (30 s at most) until node I's /readyz answers; if it does
# not, it prints the end of the node's log and fails.
ready() {
  local i=$1
  for _ in $(seq 1 300); do
    if curl -fs "http://127.0.0.1:$(port "$i" 3)/readyz" >/dev/null 2>&1; then return 0; fi
    alive "$(cat "$DIR/node-$i.pid")" || break
    sleep 0.1
  done
  echo "node $i is not ready; the end of $DIR/node-$i.log:" >&2
  tail -20 "$DIR/node-$i.log" >&2
  return 1
}

# start_node I (re)starts node I alone, with the flags start gives it, and
# waits until it is ready; the others are left as they are.
start_node() {
  local i=$1
  case $i in
    [1-9]) [ "$i" -le $NODES ] || { echo "no node $i (1..$NODES)" >&2; exit 2; } ;;
    *) echo "usage: $0 start-node I (1..$NODES)" >&2; exit 2 ;;
  esac
  if [ -f "$DIR/node-$i.pid" ] && alive "$(cat "$DIR/node-$i.pid")"; then
    echo "node $i of $DIR is already running" >&2
    exit 1
  fi
  [ -x "$BIN/sluiced" ] || "$GO" build -o "$BIN/sluiced" ./cmd/sluiced
  launch "$i"
  ready "$i" || exit 1
  echo "node $i of $DIR running again (pid $(cat "$DIR/node-$i.pid"))"
}

# kill_node I SIGKILLs node I (no graceful shutdown: a crash) and waits
# (30 s at most) until it is gone, so that a start-node right after finds
# its ports and data dir free.
kill_node() {
  local i=$1 pid
  case $i in
    [1-9]) [ "$i" -le $NODES ] || { echo "no node $i (1..$NODES)" >&2; exit 2; } ;;
    *) echo "usage: $0 kill-node I (1..$NODES)" >&2; exit 2 ;;
  esac
  [ -f "$DIR/node-$i.pid" ] || { echo "node $i of $DIR was never started" >&2; exit 1; }
  pid=$(cat "$DIR/node-$i.pid")
  alive "$pid" || { echo "node $i of $DIR (pid $pid) is not running" >&2; exit 1; }
  kill -KILL "$pid"
  gone "$pid" 30 || { echo "node $i of $DIR (pid $pid) still runs 30 s after SIGKILL" >&2; exit 1; }
  echo "node $i of $DIR (pid $pid) killed"
}

start() {
  for i in $(seq 1 $NODES); do
    if [ -f "$DIR/node-$i.pid" ] && alive "$(cat "$DIR/node-$i.pid")"; then
      echo "node $i of $DIR is already running; make cluster-stop first" >&2
      exit 1
    fi
  done
  mkdir -p "$BIN" "$DIR"
  "$GO" build -o "$BIN/sluiced" ./cmd/sluiced
  "$GO" build -o "$BIN/sluice" ./cmd/sluice
  local brokers="" kafka=""
  for i in $(seq 1 $NODES); do
    brokers="$brokers${brokers:+,}127.0.0.1:$(port "$i" 0)"
    kafka="$kafka${kafka:+,}127.0.0.1:$(port "$i" 5)"
  done
  for i in $(seq 1 $NODES); do
    launch "$i"
  done
  echo "waiting for the nodes to be ready..."
  for i in $(seq 1 $NODES); do
    if ! ready "$i"; then
      stop
      exit 1
    fi
  done
  cat <<MSG
Sluice cluster of $NODES nodes running; data and logs in $DIR/.
  brokers:  $brokers
  kafka:    $kafka   (Kafka clients: bootstrap.servers / kcat -b)
  try:      SLUICE_BROKERS=$brokers $BIN/sluice cluster status
  logs:     tail -f $DIR/node-*.log
  stop:     make cluster-stop   (or DIR=$DIR scripts/cluster.sh stop)
MSG
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  start-node) start_node "${2:-}" ;;
  kill-node) kill_node "${2:-}" ;;
  *) echo "usage: $0 [start|stop|start-node I|kill-node I]" >&2; exit 2 ;;
esac
