#!/usr/bin/env bash
# `make kafka-clients`: Kafka clients nobody here wrote — librdkafka (through
# Debian's kcat and python3-confluent-kafka) and kafkajs — against real
# sluiced processes' Kafka listeners; fails if any check does
# (examples/kafka/README.md, docs/kafka.md "Clients tested").
#
#  1. checks the tools, naming the Debian package of any that is missing
#     (never skips): kcat, /usr/bin/python3 with python3-confluent-kafka,
#     node (nodejs), npm, curl (scripts/cluster.sh waits with it), timeout;
#  2. runs `npm ci` in examples/kafka/node when node_modules is missing or
#     older than package-lock.json;
#  3. builds bin/sluiced and bin/sluice, starts one combined node on
#     127.0.0.1 with every listener on port 0 (the start line names the
#     bound addresses) and its data in a temporary directory, waits until
#     /readyz answers 200, and runs against its Kafka address:
#       kcat     -L (the broker, then a topic made over the gRPC door); per
#                codec (-z none, gzip, snappy, lz4, zstd) an idempotent
#                produce of keyed, null-keyed and null-valued records with
#                headers (-H, an empty and a null value), librdkafka's log
#                showing the batch went out with that codec; then -C -e
#                from the beginning, whose output must be exactly what was
#                produced;
#       python   examples/kafka/python/kafka_example.py (confluent-kafka);
#       node     examples/kafka/node/kafka_example.js (kafkajs: a consumer
#                group, transactions, a transactional copy);
#     then stops the node;
#  4. starts three nodes with scripts/cluster.sh (their data and logs under
#     the temporary directory) on free loopback ports, and checks that
#     `kcat -L` on node 1 lists all three brokers at their Kafka addresses,
#     that a topic with replication factor 3 shows three replicas in sync
#     for each partition, and that kcat produces to it (acks=all) and
#     consumes back exactly what it produced, with the partition leaders
#     on several nodes; then the Python and Node programs run again, with
#     replication factor 3, bootstrapped on nodes 2 and 3; then
#     examples/kafka/python/txn_copier.py (transactions with a classic
#     consumer group) copies a topic of COPIER_RECORDS records while two
#     copiers share the group, one is SIGKILLed inside a transaction and
#     replaced under its transactional id, and node 2 is SIGKILLed and
#     restarted (scripts/cluster.sh start-node); the copy read
#     read_committed must hold every input value once, in its partition,
#     nothing else, and the group's committed offsets must be the input's
#     ends; the cluster is stopped (trap on EXIT).
#
# The cluster's ports: scripts/cluster.sh gives node i the ports
# BASE_PORT+10*i .. +5; BASE_PORT is drawn at random in 12000-18900 until
# all eighteen are free for TCP and UDP (below the kernel's ephemeral
# range, away from the Go tests' 20000-31999, `make run`'s 9400 and 9092
# and `make cluster`'s 9510-9535).
#
# Environment: GO (go), BIN (bin), PYTHON (/usr/bin/python3: the
# interpreter Debian's python3-* packages install for), NODE (node), NPM
# (npm), KCAT (kcat), CLIENT_TIMEOUT (120: seconds per client run),
# CONSUME_TIMEOUT (30: seconds for one kcat -C -e), COPIER_RECORDS (600:
# the copier's input, a multiple of 3), KEEP=1 keeps the temporary
# directory (data and logs; the copiers' output under copier/).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
NODE=${NODE:-node}
NPM=${NPM:-npm}
KCAT=${KCAT:-kcat}
CLIENT_TIMEOUT=${CLIENT_TIMEOUT:-120}
CONSUME_TIMEOUT=${CONSUME_TIMEOUT:-30}
CODECS=(none gzip snappy lz4 zstd)
# A codec named here may go out uncompressed (the run says so). None:
# librdkafka 2.0.2 compresses lz4 only when the broker's ApiVersions lists
# FindCoordinator (its "LZ4" feature dates from Kafka 0.8.2), which the
# door does since it serves consumer groups.
ALLOW_UNCOMPRESSED=()

die() {
  echo "kafka-clients: $*" >&2
  exit 1
}

say() {
  echo "kafka-clients: $*"
}

# shellcheck source=scripts/lib/node.sh
. scripts/lib/node.sh

# 1. Tools. Each message names what to install; .ci/run installs them all.
missing=()
command -v "$KCAT" >/dev/null 2>&1 ||
  missing+=("$KCAT not found: install Debian's kcat (apt-get install kcat)")
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  missing+=("$PYTHON not found: install Debian's python3 (apt-get install python3)")
else
  "$PYTHON" -c 'import confluent_kafka' >/dev/null 2>&1 ||
    missing+=("$PYTHON cannot import confluent_kafka: install Debian's python3-confluent-kafka (apt-get install python3-confluent-kafka)")
fi
command -v "$NODE" >/dev/null 2>&1 ||
  missing+=("$NODE not found: install Debian's nodejs (apt-get install nodejs)")
command -v "$NPM" >/dev/null 2>&1 ||
  missing+=("$NPM not found: install Debian's npm (apt-get install npm)")
command -v curl >/dev/null 2>&1 ||
  missing+=("curl not found: install Debian's curl (apt-get install curl)")
command -v timeout >/dev/null 2>&1 ||
  missing+=("timeout not found: install Debian's coreutils")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'kafka-clients: %s\n' "${missing[@]}" >&2
  die "missing tools (see above); .ci/run installs them"
fi

# 2. kafkajs, pinned by examples/kafka/node/package-lock.json.
nodedir=examples/kafka/node
if [ ! -f $nodedir/node_modules/.package-lock.json ] ||
  [ $nodedir/package-lock.json -nt $nodedir/node_modules/.package-lock.json ]; then
  say "npm ci in $nodedir"
  (cd $nodedir && "$NPM" ci --ignore-scripts --no-audit --no-fund) ||
    die "npm ci in $nodedir failed (the npm registry must be reachable, or its cache filled)"
fi

mkdir -p "$BIN"
"$GO" build -o "$BIN/sluiced" ./cmd/sluiced
"$GO" build -o "$BIN/sluice" ./cmd/sluice

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-kafka-clients.XXXXXX")
nodelog="$work/sluiced.log"
pid=""
cluster=""
cleanup() {
  local rc=$?
  [ -z "$pid" ] || stop_process "$pid" sluiced
  if [ -n "$cluster" ]; then
    DIR="$cluster" scripts/cluster.sh stop >/dev/null || true
    if [ $rc -ne 0 ]; then
      for f in "$cluster"/node-*.log; do
        [ -f "$f" ] || continue
        echo "kafka-clients: last lines of $f:" >&2
        tail -n 15 "$f" >&2 || true
      done
    fi
  fi
  finish_work $rc kafka-clients "$work" "$nodelog"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# No SLUICE_* variable of the caller's may configure the nodes (sluiced
# reads every flag from one), and flags fix all the addresses.
for v in $(compgen -e | grep '^SLUICE_' || true); do unset "$v"; done

# Every check runs, even after one failed; any failure fails the run.
failed=()
run() {
  local name=$1
  shift
  local start=$SECONDS rc=0
  say "--- $name"
  "$@" || rc=$?
  if [ $rc -eq 124 ]; then
    echo "kafka-clients: $name did not finish within $CLIENT_TIMEOUT s" >&2
  fi
  if [ $rc -ne 0 ]; then
    echo "kafka-clients: $name FAILED (exit $rc, $((SECONDS - start)) s)" >&2
    failed+=("$name")
  else
    say "$name passed ($((SECONDS - start)) s)"
  fi
}

# kc ARGS... is kcat, bounded in time.
kc() {
  timeout "$CLIENT_TIMEOUT" "$KCAT" "$@"
}

# topic_ready KAFKA TOPIC PARTITIONS RF waits (30 s at most) until kcat -L
# shows TOPIC with PARTITIONS partitions, each with a leader and RF
# replicas, all in sync; it prints the metadata.
topic_ready() {
  local kafka=$1 topic=$2 partitions=$3 rf=$4 deadline=$((SECONDS + 30)) md
  while :; do
    md=$(kc -b "$kafka" -L -t "$topic" 2>&1 || true)
    if grep -q "topic \"$topic\" with $partitions partitions:" <<<"$md" &&
      [ "$(grep -cE "^ +partition [0-9]+, leader [0-9]+, replicas: ([0-9]+,){$((rf - 1))}[0-9]+, isrs: ([0-9]+,){$((rf - 1))}[0-9]+$" <<<"$md")" = "$partitions" ]; then
      echo "$md"
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "kcat -L -t $topic after 30 s:" >&2
      echo "$md" >&2
      return 1
    fi
    sleep 0.2
  done
}

# consume KAFKA TOPIC DIR FORMAT-ARGS... reads every partition of TOPIC
# from the beginning to its end (kcat -C -e, CONSUME_TIMEOUT seconds at
# most) into DIR/consumed.raw, its log into DIR/consume.log.
consume() {
  local kafka=$1 topic=$2 dir=$3 rc=0
  shift 3
  timeout "$CONSUME_TIMEOUT" "$KCAT" -b "$kafka" -C -t "$topic" -o beginning -e "$@" \
    >"$dir/consumed.raw" 2>"$dir/consume.log" || rc=$?
  [ $rc = 0 ] && return 0
  if [ $rc = 124 ]; then
    echo "kcat: FAILED: kcat -C -e did not reach the end of $topic within $CONSUME_TIMEOUT s ($(wc -l <"$dir/consumed.raw") records read); its last lines:" >&2
  else
    echo "kcat: FAILED: kcat -C -e exited $rc; its last lines:" >&2
  fi
  # librdkafka repeats its errors: each once, with how often (timestamps cut).
  grep -v '^% Reached end' "$dir/consume.log" | sed 's/^%\([0-9]\)|[0-9.]*|/%\1|/' |
    sort | uniq -c | sort -rn | head -n 5 >&2
  return 1
}

# kcat_roundtrip KAFKA GRPC: the single node's kcat checks. Runs in a
# subshell; any failure exits it non-zero with a message.
kcat_roundtrip() (
  local kafka=$1 grpc=$2 topic="kcat-$RANDOM$RANDOM" dir="$work/kcat"
  mkdir -p "$dir"
  bad() {
    echo "kcat: FAILED: $*" >&2
    exit 1
  }
  # A codec that did not go on the wire fails the check at the end, after
  # the others and the consume have run.
  local soft=0
  soft_bad() {
    echo "kcat: FAILED: $*" >&2
    soft=1
  }
  say "kcat: $("$KCAT" -V 2>&1 | grep -m1 '^Version')"

  md=$(kc -b "$kafka" -L 2>&1) || bad "kcat -L failed: $md"
  grep -qx ' 1 brokers:' <<<"$md" && grep -qE "^  broker 1 at $kafka( \(controller\))?$" <<<"$md" ||
    bad "kcat -L does not list broker 1 at $kafka alone:"$'\n'"$md"
  say "kcat -L: broker 1 at $kafka"

  "$BIN/sluice" --brokers "$grpc" topic create "$topic" --partitions 2 --replication-factor 1 >/dev/null ||
    bad "sluice topic create $topic failed"
  md=$(topic_ready "$kafka" "$topic" 2 1) || bad "kcat -L: $topic not ready"
  say "kcat -L: topic $topic with 2 partitions, leader 1 (made over the gRPC door)"

  # Codec j goes to partition j % 2; the records of one run follow each
  # other there. Expected lines: partition|offset|key|value|headers|value size.
  local sluice40 j=0 codec p i key value off
  sluice40=$(printf 'sluice %.0s' $(seq 1 40))
  declare -A next=([0]=0 [1]=0)
  : >"$dir/expected"
  for codec in "${CODECS[@]}"; do
    p=$((j % 2))
    : >"$dir/in-$codec"
    for i in $(seq 0 7); do
      off=${next[$p]}
      next[$p]=$((off + 1))
      headers="codec=$codec,run=$j,empty=,null=NULL"
      case $i in
        0) # no key delimiter: a null key
          value="$codec-$i-nokey $sluice40"
          echo "$value" >>"$dir/in-$codec"
          echo "$p|$off|NULL|$value|$headers|${#value}" >>"$dir/expected" ;;
        1) # nothing after the delimiter, with -Z: a null value
          echo "$codec-key-$i:" >>"$dir/in-$codec"
          echo "$p|$off|$codec-key-$i|NULL|$headers|-1" >>"$dir/expected" ;;
        *)
          value="$codec-$i $sluice40"
          echo "$codec-key-$i:$value" >>"$dir/in-$codec"
          echo "$p|$off|$codec-key-$i|$value|$headers|${#value}" >>"$dir/expected" ;;
      esac
    done
    kc -b "$kafka" -P -t "$topic" -p "$p" -K: -Z -z "$codec" \
      -H "codec=$codec" -H "run=$j" -H "empty=" -H null \
      -X enable.idempotence=true -X linger.ms=50 -d msg \
      <"$dir/in-$codec" 2>"$dir/produce-$codec.log" ||
      bad "kcat -P -z $codec failed: $(tail -n 5 "$dir/produce-$codec.log")"
    # librdkafka's own account of each batch: "... PID{Id:N,Epoch:E}, CODEC)".
    local sent want=$codec
    [ "$codec" != none ] || want=uncompressed
    sent=$(sed -n 's/.*Produce MessageSet with .*, \(PID{[^}]*}\), \([a-z0-9]*\))$/\1 \2/p' "$dir/produce-$codec.log" | sort -u)
    [ -n "$sent" ] || bad "-z $codec: librdkafka logged no Produce MessageSet: $(tail -n 5 "$dir/produce-$codec.log")"
    ! grep -qv '^PID{Id:' <<<"$sent" || bad "-z $codec: not idempotent: $sent"
    if [ "$(awk '{print $2}' <<<"$sent" | sort -u)" != "$want" ]; then
      if [[ " ${ALLOW_UNCOMPRESSED[*]} " == *" $codec "* ]] && [ "$(awk '{print $2}' <<<"$sent" | sort -u)" = uncompressed ]; then
        say "kcat -z $codec: librdkafka sent it uncompressed (allowed: $(grep -m1 -o 'Broker does not support compression type [a-z0-9]*' "$dir/produce-$codec.log" || echo 'no notice'))"
      else
        soft_bad "-z $codec: the batches went out as: $sent ($(grep -m1 -o 'Broker does not support compression type.*' "$dir/produce-$codec.log" || echo 'no notice'))"
      fi
    fi
    say "kcat -P -z $codec: 8 records to partition $p, sent $(awk '{print $2}' <<<"$sent" | sort -u | paste -sd' ' -) by $(awk '{print $1}' <<<"$sent" | sort -u | paste -sd' ' -)"
    j=$((j + 1))
  done

  consume "$kafka" "$topic" "$dir" -Z -f '%p|%o|%k|%s|%h|%S\n' || exit 1
  sort -t'|' -k1,1n -k2,2n "$dir/expected" -o "$dir/expected"
  sort -t'|' -k1,1n -k2,2n "$dir/consumed.raw" >"$dir/consumed"
  diff -u "$dir/expected" "$dir/consumed" >"$dir/diff" ||
    bad "kcat -C output differs from what was produced (- produced, + consumed):"$'\n'"$(head -n 40 "$dir/diff")"
  say "kcat -C -e: $(wc -l <"$dir/consumed") records, exactly as produced (keys, null keys and values, headers with empty and null values)"
  [ $soft = 0 ] || exit 1
)

# kcat_cluster KAFKA1 KAFKA2 KAFKA3 GRPC1: the 3-node checks.
kcat_cluster() (
  local k1=$1 k2=$2 k3=$3 grpc=$4 topic="kcat-rf3-$RANDOM$RANDOM" dir="$work/kcat-rf3"
  mkdir -p "$dir"
  bad() {
    echo "kcat (3 nodes): FAILED: $*" >&2
    exit 1
  }
  local md deadline=$((SECONDS + 30))
  while :; do
    md=$(kc -b "$k1" -L 2>&1 || true)
    if grep -qx ' 3 brokers:' <<<"$md" &&
      grep -qE "^  broker 1 at $k1( \(controller\))?$" <<<"$md" &&
      grep -qE "^  broker 2 at $k2( \(controller\))?$" <<<"$md" &&
      grep -qE "^  broker 3 at $k3( \(controller\))?$" <<<"$md"; then
      break
    fi
    [ $SECONDS -lt $deadline ] ||
      bad "kcat -L on node 1 does not list brokers 1, 2, 3 at $k1, $k2, $k3 after 30 s:"$'\n'"$md"
    sleep 0.2
  done
  say "kcat -L on node 1: brokers 1, 2, 3 at $k1, $k2, $k3"

  "$BIN/sluice" --brokers "$grpc" topic create "$topic" --partitions 3 --replication-factor 3 >/dev/null ||
    bad "sluice topic create $topic --replication-factor 3 failed"
  md=$(topic_ready "$k1" "$topic" 3 3) || bad "kcat -L: $topic not ready with 3 replicas in sync"
  local leaders
  leaders=$(sed -n 's/^ *partition \([0-9]*\), leader \([0-9]*\),.*/\2/p' <<<"$md" | sort -u | paste -sd' ' -)
  say "kcat -L: $topic, 3 partitions, each with 3 replicas in sync; leaders on brokers $leaders"

  # Partition p gets 10 records with codec ${codecs[p]}, acks=all.
  local codecs=(none zstd gzip) p i
  : >"$dir/expected"
  for p in 0 1 2; do
    : >"$dir/in-$p"
    for i in $(seq 0 9); do
      echo "k-$p-$i:v-$p-$i" >>"$dir/in-$p"
      echo "$p|$i|k-$p-$i|v-$p-$i|p=$p" >>"$dir/expected"
    done
    kc -b "$k1" -P -t "$topic" -p "$p" -K: -z "${codecs[$p]}" -H "p=$p" \
      -X enable.idempotence=true -X acks=all <"$dir/in-$p" 2>"$dir/produce-$p.log" ||
      bad "kcat -P to partition $p (via node 1) failed: $(tail -n 5 "$dir/produce-$p.log")"
  done
  consume "$k1" "$topic" "$dir" -f '%p|%o|%k|%s|%h\n' || exit 1
  sort -t'|' -k1,1n -k2,2n "$dir/expected" -o "$dir/expected"
  sort -t'|' -k1,1n -k2,2n "$dir/consumed.raw" >"$dir/consumed"
  diff -u "$dir/expected" "$dir/consumed" >"$dir/diff" ||
    bad "kcat -C output differs from what was produced (- produced, + consumed):"$'\n'"$(head -n 40 "$dir/diff")"
  say "kcat (bootstrapped on node 1) produced 30 records with acks=all to 3 partitions led by brokers $leaders and consumed them back exactly"
)

# copier_cluster KAFKA1 KAFKA2 KAFKA3 GRPC1: examples/kafka/python/txn_copier.py
# (librdkafka's transactions, version 1, with a classic consumer group)
# copies a topic while things fail: two copiers share the group (a
# rebalance), one is SIGKILLed in the middle of a transaction and replaced
# by a copier with its transactional id (which fences it and aborts what it
# left open), and node 2 is SIGKILLed and restarted. The copy, read
# read_committed, must hold every input value exactly once and nothing
# else, and the group's committed offsets must be the input's ends.
COPIER_RECORDS=${COPIER_RECORDS:-600}
copier_cluster() (
  local k1=$1 k2=$2 k3=$3 grpc=$4 id="$RANDOM$RANDOM" dir="$work/copier"
  local in="copier-in-$id" out="copier-out-$id" group="copier-$id" bootstrap="$1,$2,$3"
  local n=$COPIER_RECORDS per=$((COPIER_RECORDS / 3)) killed_node=2
  mkdir -p "$dir"
  local pids=()
  bad() {
    echo "txn_copier (3 nodes): FAILED: $*" >&2
    local f
    for f in "$dir"/*.err; do
      [ -f "$f" ] || continue
      echo "txn_copier: last lines of $f:" >&2
      tail -n 8 "$f" >&2
    done
    # The steps after this one need all three nodes: node 2 comes back if
    # the check stopped while it was down (a no-op when it runs).
    DIR="$cluster" BIN="$BIN" GO="$GO" BASE_PORT=$base scripts/cluster.sh start-node $killed_node >/dev/null 2>&1 || true
    exit 1
  }
  # The copiers never outlive this check.
  trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
  # commits FILE...: the transactions the copiers writing FILE... committed.
  commits() { cat "$@" 2>/dev/null | wc -l; }
  # committed N FILE...: whether they hold N transactions at least.
  committed() {
    local want=$1
    shift
    [ "$(commits "$@")" -ge "$want" ]
  }
  # wait_until SECONDS WHAT CMD...: polls CMD until it succeeds.
  wait_until() {
    local limit=$1 what=$2 deadline=$((SECONDS + $1))
    shift 2
    until "$@"; do
      [ $SECONDS -lt $deadline ] || bad "$what: not within $limit s ($(commits "$dir"/*.out) transactions committed so far)"
      sleep 0.2
    done
  }
  # copier NAME TXNID: starts a copier; its stdout to DIR/NAME.out.
  copier() {
    "$PYTHON" examples/kafka/python/txn_copier.py --bootstrap "$bootstrap" --input "$in" --output "$out" \
      --group "$group" --transactional-id "$2" --until-end --max-batch 10 --pace-ms 300 \
      --transaction-timeout-ms 10000 --session-timeout-ms 6000 >"$dir/$1.out" 2>"$dir/$1.err" &
    pids+=($!)
    eval "pid_$1=$!"
  }

  local t
  for t in "$in" "$out"; do
    "$BIN/sluice" --brokers "$grpc" topic create "$t" --partitions 3 --replication-factor 3 >/dev/null ||
      bad "sluice topic create $t failed"
    topic_ready "$k1" "$t" 3 3 >/dev/null || bad "$t not ready with 3 replicas in sync"
  done
  local p
  : >"$dir/expected"
  for p in 0 1 2; do
    seq 0 $((per - 1)) | sed "s/^/in-$p-/" >"$dir/in-$p"
    sed "s/^/$p:copy:/" "$dir/in-$p" >>"$dir/expected" # partition:value
    kc -b "$k1" -P -t "$in" -p "$p" -X enable.idempotence=true -X acks=all <"$dir/in-$p" 2>"$dir/produce.log" ||
      bad "kcat -P to $in partition $p failed: $(tail -n 3 "$dir/produce.log")"
  done
  n=$((3 * per))
  say "txn_copier: $n records in $in (3 partitions, replication factor 3)"

  local pid_a="" pid_b="" pid_a2=""
  copier a "copier-$id-a"
  wait_until 60 "copier a committing" committed 2 "$dir/a.out"
  copier b "copier-$id-b"
  wait_until 60 "copier b committing (the group rebalanced onto two members)" committed 1 "$dir/b.out"
  # Copier a is killed 150 ms after it committed a transaction since the
  # rebalance: inside the next one, whose records are sent (flushed) and
  # which waits 300 ms (--pace-ms) before it commits.
  local before
  before=$(commits "$dir/a.out")
  wait_until 60 "copier a committing after the rebalance" committed $((before + 1)) "$dir/a.out"
  before=$(commits "$dir/a.out")
  local deadline=$((SECONDS + 30))
  until committed $((before + 1)) "$dir/a.out"; do
    [ $SECONDS -lt $deadline ] || bad "copier a committing after the rebalance: not within 30 s"
    sleep 0.02
  done
  sleep 0.15
  kill -KILL "$pid_a"
  say "txn_copier: SIGKILLed copier a in its transaction $(($(commits "$dir/a.out") + 1))"
  copier a2 "copier-$id-a"
  wait_until 60 "copier a2 (copier a's transactional id) committing" committed 1 "$dir/a2.out"
  # kill-node waits until the process is gone: a restart while it is
  # still exiting (or a zombie not yet reaped) would find it running.
  DIR="$cluster" scripts/cluster.sh kill-node $killed_node >"$dir/kill.log" 2>&1 ||
    bad "SIGKILL of node $killed_node: $(tail -n 3 "$dir/kill.log")"
  say "txn_copier: SIGKILLed node $killed_node ($(cat "$dir/kill.log")) after $(commits "$dir"/*.out) transactions"
  before=$(commits "$dir"/*.out)
  wait_until 60 "copiers committing with node $killed_node down" committed $((before + 3)) "$dir"/*.out
  DIR="$cluster" BIN="$BIN" GO="$GO" BASE_PORT=$base scripts/cluster.sh start-node $killed_node >"$dir/restart.log" 2>&1 ||
    bad "restarting node $killed_node failed: $(tail -n 5 "$dir/restart.log")"
  say "txn_copier: node $killed_node restarted after $(commits "$dir"/*.out) transactions"

  # Copiers b and a2 stop once the group's committed offsets are the ends.
  local rc name
  for name in b a2; do
    eval "p=\$pid_$name"
    wait_until 120 "copier $name finishing (the group's committed offsets reaching the ends)" eval "! kill -0 $p 2>/dev/null"
    rc=0
    wait "$p" || rc=$?
    [ $rc = 0 ] || bad "copier $name exited $rc"
  done
  say "txn_copier: $(commits "$dir"/*.out) transactions committed (a: $(commits "$dir/a.out"), b: $(commits "$dir/b.out"), a2: $(commits "$dir/a2.out")), aborts: $(cat "$dir"/*.err | grep -c 'aborting the transaction' || true)"

  # The copy, read_committed to the end of every partition.
  timeout "$CONSUME_TIMEOUT" "$KCAT" -b "$k1" -C -t "$out" -o beginning -e -X isolation.level=read_committed \
    -f '%p:%s\n' >"$dir/copied" 2>"$dir/consume.log" || bad "kcat -C read_committed of $out: $(tail -n 3 "$dir/consume.log")"
  sort "$dir/expected" -o "$dir/expected"
  sort "$dir/copied" -o "$dir/copied"
  local missing dup extra
  missing=$(comm -23 "$dir/expected" <(sort -u "$dir/copied"))
  dup=$(uniq -d "$dir/copied")
  extra=$(comm -13 "$dir/expected" <(sort -u "$dir/copied"))
  [ -z "$missing$dup$extra" ] ||
    bad "the copy (read_committed; partition:value) is not each input once, in its partition: $(wc -l <"$dir/copied") records for $n;" \
      "missing $(wc -w <<<"$missing"): $(head -n 10 <<<"$missing" | paste -sd' ' -);" \
      "duplicated $(wc -w <<<"$dup"): $(head -n 10 <<<"$dup" | paste -sd' ' -);" \
      "not from the input $(wc -w <<<"$extra"): $(head -n 10 <<<"$extra" | paste -sd' ' -)"
  # Read uncommitted, the copy holds more: at least copier a's open
  # transaction, aborted when copier a2 took its transactional id.
  local uncommitted
  uncommitted=$(timeout "$CONSUME_TIMEOUT" "$KCAT" -b "$k1" -C -t "$out" -o beginning -e -X isolation.level=read_uncommitted -f '%s\n' 2>/dev/null | wc -l || true)
  [ "$uncommitted" -gt "$n" ] ||
    bad "the copy read read_uncommitted has $uncommitted records, no more than the $n committed: copier a's open transaction never reached the log (killed too early or too late?)"

  # The group's committed offsets: the input's ends.
  local committed
  committed=$("$PYTHON" - "$bootstrap" "$group" "$in" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, group, topic = sys.argv[1:]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
print(" ".join(f"{tp.partition}:{tp.offset}" for tp in c.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)))
c.close()
PY
  ) || bad "reading the group's committed offsets failed"
  [ "$committed" = "0:$per 1:$per 2:$per" ] ||
    bad "group $group committed offsets $committed, expected the ends 0:$per 1:$per 2:$per"
  say "txn_copier: the copy read read_committed holds each of the $n input values once ($uncommitted records read_uncommitted:" \
    "$((uncommitted - n)) of aborted transactions); group $group committed $committed"
)

# kcat_scram KAFKA GRPC: librdkafka logs in by SCRAM (SASL_PLAINTEXT: the
# node has no TLS) with both mechanisms, produces and reads back as the
# user; a wrong password is refused. Debian's librdkafka (2.0.2) sends
# its nonce twice in SCRAM's final message (confluentinc/librdkafka#4895),
# which the Kafka door accepts (auth/exchange.go; Kafka 4 refuses it).
kcat_scram() (
  local kafka=$1 grpc=$2 topic="scram-$RANDOM$RANDOM" dir="$work/scram" m user
  mkdir -p "$dir"
  bad() {
    echo "kcat SCRAM: FAILED: $*" >&2
    exit 1
  }
  "$BIN/sluice" --brokers "$grpc" topic create "$topic" --partitions 1 --replication-factor 1 >/dev/null ||
    bad "sluice topic create $topic failed"
  for m in SCRAM-SHA-256 SCRAM-SHA-512; do
    user="u-${m#SCRAM-SHA-}"
    echo "pw-$user" | "$BIN/sluice" --brokers "$grpc" user create "$user" --mechanism "$m" --password-stdin >/dev/null ||
      bad "sluice user create $user ($m) failed"
  done
  # The users reach the broker's metadata asynchronously: retry the first
  # login a while.
  local deadline=$((SECONDS + 30))
  for m in SCRAM-SHA-256 SCRAM-SHA-512; do
    user="u-${m#SCRAM-SHA-}"
    local sasl=(-X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms="$m" -X sasl.username="$user" -X sasl.password="pw-$user")
    until kc -b "$kafka" "${sasl[@]}" -L -t "$topic" >"$dir/md-$m.log" 2>&1; do
      [ $SECONDS -lt $deadline ] || bad "$m login as $user: $(tail -n 3 "$dir/md-$m.log")"
      sleep 0.5
    done
    printf '%s\n' "$m-1" "$m-2" | kc -b "$kafka" "${sasl[@]}" -P -t "$topic" -p 0 2>"$dir/produce-$m.log" ||
      bad "$m produce as $user: $(tail -n 3 "$dir/produce-$m.log")"
    say "kcat SCRAM: $m login as $user, 2 records produced"
  done
  local got
  got=$(timeout "$CONSUME_TIMEOUT" "$KCAT" -b "$kafka" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 \
    -X sasl.username=u-256 -X sasl.password=pw-u-256 -C -t "$topic" -o beginning -e -f '%s\n' 2>"$dir/consume.log") ||
    bad "consume: $(tail -n 3 "$dir/consume.log")"
  [ "$(paste -sd' ' - <<<"$got")" = "SCRAM-SHA-256-1 SCRAM-SHA-256-2 SCRAM-SHA-512-1 SCRAM-SHA-512-2" ] ||
    bad "read back: $got"
  if kc -b "$kafka" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=u-256 \
    -X sasl.password=wrong -m 5 -L >"$dir/wrong.log" 2>&1; then
    bad "a wrong password logged in"
  fi
  grep -q -i "authentication failed\|SASL_AUTHENTICATION_FAILED\|Authentication failed" "$dir/wrong.log" ||
    bad "a wrong password: no authentication failure in kcat's output: $(tail -n 3 "$dir/wrong.log")"
  say "kcat SCRAM: read back as u-256, 4 records in order; a wrong password is refused"
)

# free_base_port prints a BASE_PORT for scripts/cluster.sh whose eighteen
# ports are all free for TCP and UDP a moment ago.
free_base_port() { "$PYTHON" scripts/free-base-port.py; }

# 3. One node, on free loopback ports, data in a temporary directory.
"$BIN/sluiced" --node-id 1 --data-dir "$work/data" \
  --listen 127.0.0.1:0 --internal-listen 127.0.0.1:0 --raft-listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --kafka-listen 127.0.0.1:0 \
  >"$nodelog" 2>&1 &
pid=$!
wait_ready "$pid" "$nodelog"
kafka=$(grep -m1 'msg="sluice node started"' "$nodelog" | sed -n 's/.* kafka_listen=\([^ ]*\).*/\1/p')
[ -n "$kafka" ] || die "no kafka_listen= address in sluiced's start line"
say "sluiced ready: Kafka $kafka, gRPC $addr, HTTP $http, data in $work/data"

run kcat kcat_roundtrip "$kafka" "$addr"
run "kcat SCRAM" kcat_scram "$kafka" "$addr"
run python timeout "$CLIENT_TIMEOUT" "$PYTHON" examples/kafka/python/kafka_example.py --bootstrap "$kafka"
run node timeout "$CLIENT_TIMEOUT" "$NODE" $nodedir/kafka_example.js --bootstrap "$kafka" --kcat "$KCAT"

stop_process "$pid" sluiced
pid=""

# 4. Three nodes (scripts/cluster.sh), on free loopback ports.
base=$(free_base_port) || die "no free BASE_PORT in 12000-18900 for three nodes"
cluster="$work/cluster"
say "starting three nodes with scripts/cluster.sh, BASE_PORT $base, in $cluster"
DIR="$cluster" BASE_PORT=$base GO="$GO" BIN="$BIN" scripts/cluster.sh start >"$work/cluster-start.log" 2>&1 || {
  cat "$work/cluster-start.log" >&2
  die "scripts/cluster.sh start failed"
}
k1=127.0.0.1:$((base + 15)) k2=127.0.0.1:$((base + 25)) k3=127.0.0.1:$((base + 35))
g1=127.0.0.1:$((base + 10))

run "kcat, 3 nodes" kcat_cluster "$k1" "$k2" "$k3" "$g1"
run "python, 3 nodes" timeout "$CLIENT_TIMEOUT" "$PYTHON" examples/kafka/python/kafka_example.py \
  --bootstrap "$k2" --partitions 3 --replication-factor 3
run "node, 3 nodes" timeout "$CLIENT_TIMEOUT" "$NODE" $nodedir/kafka_example.js \
  --bootstrap "$k3" --partitions 3 --replication-factor 3 --kcat "$KCAT"
run "txn_copier, 3 nodes" copier_cluster "$k1" "$k2" "$k3" "$g1"

# 5. franz-go's own integration tests (github.com/twmb/franz-go/pkg/kgo,
# the version in go.mod, run from the module cache) against the three
# nodes, with replication factor 3 and 20000 records for the ETL tests:
# every test but the share-group ones (not served) and TestGroupETL's
# KIP-848 subtests, whose long form runs in `make kafka-etl`: now and then
# (2 of 12 runs) one of them fails a plain commit that its own test loop
# built before a revocation and sent after franz-go acknowledged it,
# naming partitions the member had already released — refused
# STALE_MEMBER_EPOCH for them, as Kafka does, and turned by franz-go into
# REBALANCE_IN_PROGRESS (docs/kafka.md; a gate that fails at random is no
# gate). TestGroupETL's classic subtests (range, cooperative-sticky,
# static members: three levels of consume-transform-produce, consumers
# joining and leaving) run, in a second go test since -skip cannot name
# a subtest without its siblings' parents.
# Test848RegexBrokerResolves runs: the coordinator resolves KIP-848
# regular-expression subscriptions (decision 73).
# The authentication tests skip themselves (KGO_TEST_SCRAM and the like
# are not set). docs/kafka.md lists what runs.
franz_skip='TestGroupETL|Share'
run "franz-go's kgo tests, 3 nodes" env KGO_SEEDS="$k1,$k2,$k3" KGO_TEST_RF=3 KGO_TEST_RECORDS=20000 \
  timeout 600 "$GO" test github.com/twmb/franz-go/pkg/kgo -count=1 -timeout 580s -skip "$franz_skip"
run "franz-go's TestGroupETL (classic groups), 3 nodes" env KGO_SEEDS="$k1,$k2,$k3" KGO_TEST_RF=3 KGO_TEST_RECORDS=20000 \
  timeout 600 "$GO" test github.com/twmb/franz-go/pkg/kgo -count=1 -timeout 580s -run '^TestGroupETL$' -skip 'TestGroupETL/.*/848'

if [ ${#failed[@]} -gt 0 ]; then
  die "failed: ${failed[*]}"
fi
say "all passed"
