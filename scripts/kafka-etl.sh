#!/usr/bin/env bash
# The long form of franz-go's own exactly-once tests against Sluice (issue
# 35): github.com/twmb/franz-go/pkg/kgo's TestGroupETL and TestTxnEtl (the
# version in go.mod, run from the module cache) — three levels of
# consume-transform-produce over a million records, consumers joining and
# leaving, classic groups with the range, cooperative-sticky and static
# balancers and KIP-848 groups, exactly-once verified by the tests
# themselves — against three sluiced processes on free loopback ports
# (scripts/cluster.sh), the topics with replication factor 3.
#
#   make kafka-etl                       # one million records, no faults
#   make kafka-etl FAULTS=1              # the same while nodes are SIGKILLed and paused
#   RECORDS=200000 TESTS=TestTxnEtl scripts/kafka-etl.sh
#
# With FAULTS=1 a fault loop runs beside the tests until they end: every
# FAULT_EVERY seconds (10) it picks a node at random and a fault of
# FAULT_KINDS (pause): pause pauses it (SIGSTOP) for FAULT_DOWN seconds
# (1: below the 2 s broker session timeout, so requests stall and time
# out but no leadership moves); kill SIGKILLs it and restarts it
# FAULT_DOWN seconds later with the flags it had (scripts/cluster.sh
# start-node). Each fault is printed. franz-go's own chaos dialer
# (KGO_TEST_CHAOS=1: connections cut at random) is on too. franz-go's
# tests fail on any error a poll returns: a client that dials a killed
# broker gets "connection refused", and a member of a group whose
# coordinator moved before its group's record was written gets
# UNKNOWN_MEMBER_ID (as from Kafka) — so kill, or pauses long enough to
# fence a broker, fail them by their own design whatever the broker
# does. Failovers under SIGKILL are the chaos harness's (its franz-go
# workload, docs/chaos.md) and make kafka-clients' librdkafka copier's.
# One node at a time is hit. The tests create their topics as they go,
# and a broker that is down (or fenced) cannot hold a new replica
# (INVALID_REPLICATION_FACTOR, as Kafka), so with faults the topics get
# replication factor 2 and min.insync.replicas 1: acks=all writes go on
# with one node down. The seed of the schedule is printed (SEED to repeat
# it).
#
# Environment: GO (go), BIN (bin), RECORDS (1000000), TESTS
# (TestGroupETL|TestTxnEtl), FAULTS (0), FAULT_EVERY (10), FAULT_DOWN (1),
# FAULT_KINDS (pause; or kill, or pause,kill),
# SEED (random), KEEP=1 keeps the cluster's directory (data and logs);
# otherwise it is kept only when the tests fail.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-bin}
RECORDS=${RECORDS:-1000000}
TESTS=${TESTS:-TestGroupETL|TestTxnEtl}
FAULTS=${FAULTS:-0}
FAULT_EVERY=${FAULT_EVERY:-10}
FAULT_DOWN=${FAULT_DOWN:-1}
FAULT_KINDS=${FAULT_KINDS:-pause}
SEED=${SEED:-$RANDOM}
PYTHON=${PYTHON:-python3}

say() { echo "kafka-etl: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# free_base_port prints a BASE_PORT for scripts/cluster.sh whose eighteen
# ports are all free for TCP and UDP a moment ago.
free_base_port() { "$PYTHON" scripts/free-base-port.py; }

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-kafka-etl.XXXXXX")
base=$(free_base_port) || die "no free BASE_PORT in 12000-18900 for three nodes"
faults_pid=""
status=1
cleanup() {
  if [ -n "$faults_pid" ]; then
    kill "$faults_pid" 2>/dev/null || true
    wait "$faults_pid" 2>/dev/null || true
  fi
  # A paused node is resumed so that it can stop.
  for f in "$work"/cluster/node-*.pid; do
    [ -f "$f" ] && kill -CONT "$(cat "$f")" 2>/dev/null || true
  done
  DIR="$work/cluster" scripts/cluster.sh stop >/dev/null 2>&1 || true
  if [ "$status" = 0 ] && [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$work"
  else
    say "kept $work (data and node logs in $work/cluster)"
  fi
}
trap cleanup EXIT

rf=3 args=""
if [ "$FAULTS" = 1 ]; then
  rf=2 args="--default-min-insync-replicas 1"
fi
say "three nodes with scripts/cluster.sh, BASE_PORT $base, in $work/cluster"
DIR="$work/cluster" BASE_PORT=$base GO="$GO" BIN="$BIN" ARGS="$args" scripts/cluster.sh start >"$work/cluster-start.log" 2>&1 || {
  cat "$work/cluster-start.log" >&2
  die "scripts/cluster.sh start failed"
}
seeds="127.0.0.1:$((base + 15)),127.0.0.1:$((base + 25)),127.0.0.1:$((base + 35))"

# faults runs the fault loop (FAULTS=1) until killed.
faults() {
  RANDOM=$SEED
  local n=0 kinds
  IFS=, read -r -a kinds <<<"$FAULT_KINDS"
  while true; do
    sleep "$FAULT_EVERY"
    local node=$((RANDOM % 3 + 1)) kind=${kinds[$((RANDOM % ${#kinds[@]}))]} pid
    pid=$(cat "$work/cluster/node-$node.pid")
    n=$((n + 1))
    if [ "$kind" = kill ]; then
      say "fault $n: SIGKILL node $node (pid $pid), restart in ${FAULT_DOWN}s"
      DIR="$work/cluster" scripts/cluster.sh kill-node "$node" >>"$work/restarts.log" 2>&1 ||
        say "fault $n: node $node: SIGKILL did not end it (see $work/restarts.log)"
      sleep "$FAULT_DOWN"
      DIR="$work/cluster" BASE_PORT=$base GO="$GO" BIN="$BIN" ARGS="$args" scripts/cluster.sh start-node "$node" >>"$work/restarts.log" 2>&1 ||
        say "fault $n: node $node did not come back (see $work/restarts.log)"
    else
      say "fault $n: SIGSTOP node $node (pid $pid) for ${FAULT_DOWN}s"
      kill -STOP "$pid" 2>/dev/null || true
      sleep "$FAULT_DOWN"
      kill -CONT "$pid" 2>/dev/null || true
    fi
  done
}
if [ "$FAULTS" = 1 ]; then
  case ",$FAULT_KINDS," in
  *,pause,* | *,kill,*) ;;
  *) die "FAULT_KINDS: pause, kill or both, comma separated" ;;
  esac
  say "faults ($FAULT_KINDS) every ${FAULT_EVERY}s, ${FAULT_DOWN}s each, seed $SEED; franz-go's chaos dialer on"
  faults &
  faults_pid=$!
fi

say "franz-go's $TESTS, $RECORDS records, replication factor $rf, seeds $seeds"
start=$(date +%s)
chaos=0
[ "$FAULTS" = 1 ] && chaos=1
if env KGO_SEEDS="$seeds" KGO_TEST_CHAOS=$chaos KGO_TEST_RF=$rf KGO_TEST_RECORDS="$RECORDS" \
  "$GO" test github.com/twmb/franz-go/pkg/kgo -count=1 -timeout 60m -run "$TESTS" -v >"$work/kgo.log" 2>&1; then
  status=0
fi
grep -E '^(--- |ok|FAIL)|^    --- ' "$work/kgo.log" >&2 || true
if [ $status != 0 ]; then
  grep -E '_test\.go:[0-9]+: ' "$work/kgo.log" | grep -v 'deleting\|completed in' | head -20 >&2 || true
  die "franz-go's tests failed after $(($(date +%s) - start))s (log: $work/kgo.log)"
fi
say "passed in $(($(date +%s) - start))s"
