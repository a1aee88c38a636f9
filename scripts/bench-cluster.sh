#!/usr/bin/env bash
# Three-node Sluice benchmark: replication factor 3, min.insync.replicas=2.
#
# Builds bin/sluiced and bin/sluice (or in $BIN), starts three combined (controller and
# broker) nodes on loopback with fixed ports and temporary data directories,
# creates one topic per run (6 partitions, RF 3, min.insync.replicas=2) and
# runs `sluice bench produce`: acks=1 and acks=all with 100-byte and 1 KiB
# records as fast as possible (default batching: linger 5 ms, 1 MiB
# batches), acks=all 100-byte records paced at 250,000 records/s (latency
# below saturation), and synchronous runs (--sync: one record at a time,
# the next sent when the previous is acknowledged) with acks=all and acks=1
# for the single-record latency. Each topic is deleted after its run. It
# prints one summary line per run, with the CPU the three nodes and the load
# generator used (user + system from /proc) in CPU-s per GB of payload (or
# CPU-µs per record for the small runs), stops the nodes (SIGTERM) and
# removes the data. See docs/benchmarks.md.
#
#   make bench-cluster                    # or scripts/bench-cluster.sh
#   RECORDS_100=3000000 RECORDS_1K=1000000 scripts/bench-cluster.sh
#
# Environment: BASE_PORT (19500; node i uses BASE_PORT+10*i .. +5), PARTITIONS
# (6), RECORDS_100 / RECORDS_1K / RECORDS_100_ALL / RECORDS_1K_ALL (records per
# run; the defaults take about 10 s each on a 2-core machine), PACED_RATE (250000: records/s
# of the paced acks=all 100-byte run), PROFILE_DIR (if set, CPU profiles of
# node 1 and of the load generator during the saturated acks=all 100-byte
# run are written there), SYNC_RECORDS (records of each synchronous run:
# 5000), RECORDS_TXN (records of each transactions run: 3000000),
# KAFKA_TXN_ARGS (more kafkabench flags for the door transactions
# runs, e.g. --max-buffered-records 8192), KEEP=1 keeps the data directories and logs, BIN (bin: where the
# binaries are built; another directory leaves bin/ alone, e.g. while a
# chaos run restarts nodes from it), ONLY (a regular expression: only the
# runs whose label matches, e.g. ONLY=synchronous), NODE_GOMAXPROCS (if set,
# the nodes run with GOMAXPROCS set to it; the load generator keeps Go's
# default), GODEBUG (the nodes' Go runtime settings; default
# schedtrace=2147483647, as the image, the manifests and `make run` set it:
# docs/design.md decision 47), TLS=1 (every listener with TLS, mutual
# between nodes, certificates made with `sluice cert` for the run; the
# load generator trusts their CA: docs/security.md), AUTHZ=1 (TLS=1 and
# --authorizer acl: the load generator is User:loadgen by its client
# certificate, allowed everything on topics by one ACL among 10,800 others
# on other principals and topics, created by a super user first), GO (go).
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
BASE_PORT=${BASE_PORT:-19500}
PARTITIONS=${PARTITIONS:-6}
RECORDS_100=${RECORDS_100:-9000000}
RECORDS_100_ALL=${RECORDS_100_ALL:-9000000}
RECORDS_1K=${RECORDS_1K:-1300000}
RECORDS_1K_ALL=${RECORDS_1K_ALL:-1000000}
PACED_RATE=${PACED_RATE:-250000}
SYNC_RECORDS=${SYNC_RECORDS:-5000}
PROFILE_DIR=${PROFILE_DIR:-}
BIN=${BIN:-bin}
ONLY=${ONLY:-}
RECORDS_TXN=${RECORDS_TXN:-3000000}
KAFKA_TXN_ARGS=${KAFKA_TXN_ARGS:-}
RECORDS_DOOR=${RECORDS_DOOR:-1000000}

echo "building $BIN/sluiced, $BIN/sluice and $BIN/kafkabench" >&2
"$GO" build -o "$BIN/sluiced" ./cmd/sluiced
"$GO" build -o "$BIN/sluice" ./cmd/sluice
"$GO" build -o "$BIN/kafkabench" ./tools/kafkabench

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-cluster.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		# Bounded: a node whose controlled shutdown cannot finish stops
		# after --controlled-shutdown-timeout; SIGKILL after 20 s.
		for _ in $(seq 200); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [[ -n ${KEEP:-} ]]; then
		echo "data and node logs kept in $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

port() { echo $((BASE_PORT + 10 * $1 + $2)); } # node, offset: 0 client gRPC, 1 Raft, 2 gossip, 3 HTTP, 4 internal gRPC, 5 Kafka

voters="" join="" brokers=""
for i in 1 2 3; do
	voters+="${voters:+,}$i@127.0.0.1:$(port "$i" 1)"
	join+="${join:+,}127.0.0.1:$(port "$i" 2)"
	brokers+="${brokers:+,}127.0.0.1:$(port "$i" 0)"
done
tls_args=() # per node: the node's certificate files, with TLS=1
if [[ -n ${AUTHZ:-} ]]; then
	TLS=1
fi
if [[ -n ${TLS:-} ]]; then
	"$BIN/sluice" cert create-ca --certs-dir "$work/certs" >/dev/null
	for i in 1 2 3; do
		"$BIN/sluice" cert create-node --certs-dir "$work/certs" --name "node$i" \
			--cert-file "$work/certs/node$i.crt" --key-file "$work/certs/node$i.key" >/dev/null
	done
	export SLUICE_TLS_CA_FILE="$work/certs/ca.crt"
	if [[ -n ${AUTHZ:-} ]]; then
		for u in admin loadgen; do
			"$BIN/sluice" cert create-client --certs-dir "$work/certs" --name "$u" >/dev/null
		done
	fi
fi
authz_args=()
if [[ -n ${AUTHZ:-} ]]; then
	authz_args=(--client-auth request --authorizer acl --super-users User:admin --tls-principal-mapping-rules 'RULE:^CN=([^,]+)$/$1/,DEFAULT')
fi
for i in 1 2 3; do
	mkdir -p "$work/node$i"
	if [[ -n ${TLS:-} ]]; then
		tls_args=(--tls-cert-file "$work/certs/node$i.crt" --tls-key-file "$work/certs/node$i.key" --tls-ca-file "$work/certs/ca.crt")
	fi
	GODEBUG=${GODEBUG:-schedtrace=2147483647} ${NODE_GOMAXPROCS:+env GOMAXPROCS=$NODE_GOMAXPROCS} "$BIN/sluiced" --node-id "$i" --data-dir "$work/node$i" \
		--listen "127.0.0.1:$(port "$i" 0)" --raft-listen "127.0.0.1:$(port "$i" 1)" \
		--gossip-listen "127.0.0.1:$(port "$i" 2)" --http-listen "127.0.0.1:$(port "$i" 3)" ${PROFILE_DIR:+--pprof} \
		--internal-listen "127.0.0.1:$(port "$i" 4)" --kafka-listen "127.0.0.1:$(port "$i" 5)" \
		--controller-voters "$voters" --join "$join" --controlled-shutdown-timeout 3s ${tls_args[@]+"${tls_args[@]}"} ${authz_args[@]+"${authz_args[@]}"} \
		--log-level warn >"$work/node$i.log" 2>&1 &
	pids+=($!)
done
# ready PORT: GET /readyz answers 200 (bash's /dev/tcp: no curl needed).
ready() {
	local status
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	read -r _ status _ <&3 || status=""
	exec 3<&-
	[[ $status == 200 ]]
}
for i in 1 2 3; do
	ok=""
	for _ in $(seq 300); do # 30 s
		if ready "$(port "$i" 3)" 2>/dev/null; then
			ok=1
			break
		fi
		sleep 0.1
	done
	if [[ -z $ok ]]; then
		echo "node $i not ready within 30 s; its log:" >&2
		cat "$work/node$i.log" >&2
		exit 1
	fi
done
echo "three nodes ready: $brokers" >&2
if [[ -n ${AUTHZ:-} ]]; then
	# As the super user: 10,800 ACLs of other principals (100 principals x
	# 9 operations x 12 topics), then the load generator's own.
	as_admin=(env SLUICE_TLS_CERT_FILE="$work/certs/client.admin.crt" SLUICE_TLS_KEY_FILE="$work/certs/client.admin.key")
	principals=()
	for p in $(seq 100); do principals+=(--allow-principal "User:p$p"); done
	for t in $(seq 12); do
		"${as_admin[@]}" "$BIN/sluice" --brokers "$brokers" acl create "${principals[@]}" --operation Read --operation Write --operation Create \
			--operation Delete --operation Alter --operation Describe --operation DescribeConfigs --operation AlterConfigs --operation All \
			--topic "filler-$t" >/dev/null
	done
	"${as_admin[@]}" "$BIN/sluice" --brokers "$brokers" acl create --allow-principal User:loadgen --operation All --topic '*' >/dev/null
	"${as_admin[@]}" "$BIN/sluice" --brokers "$brokers" acl create --allow-principal User:loadgen --operation IdempotentWrite --cluster >/dev/null
	echo "ACLs: $("${as_admin[@]}" "$BIN/sluice" --brokers "$brokers" --output json acl list | grep -o '"principal"' | wc -l)" >&2
	export SLUICE_TLS_CERT_FILE="$work/certs/client.loadgen.crt" SLUICE_TLS_KEY_FILE="$work/certs/client.loadgen.key"
fi

export SLUICE_BROKERS=$brokers
results=()

# topic NAME [PARTITIONS]: RF 3, min.insync.replicas=2, every ISR full
# before use.
topic() {
	local parts=${2:-$PARTITIONS}
	"$BIN/sluice" topic create "$1" --partitions "$parts" --replication-factor 3 --config min.insync.replicas=2 >/dev/null
	for _ in $(seq 200); do # 20 s
		# Every "isr":[a,b,c] of the JSON has three members.
		local isrs full
		isrs=$("$BIN/sluice" --output json topic describe "$1" | grep -o '"isr":\[[0-9,]*\]' || true)
		full=$(grep -c '^"isr":\[[0-9]*,[0-9]*,[0-9]*\]$' <<<"$isrs" || true)
		if [[ $full -eq $parts ]]; then
			return
		fi
		sleep 0.1
	done
	echo "topic $1: ISRs not full within 20 s" >&2
	exit 1
}

# shellcheck source=scripts/lib/cpu.sh
. scripts/lib/cpu.sh

# node_ticks prints the CPU time (user + system, clock ticks) the nodes
# have used so far; children_ticks the same for this script's waited-for
# children (the load generator), from /proc.
node_ticks() { cpu_ticks "${pids[@]}"; }
children_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
TICKS=$(getconf CLK_TCK)

# cpu_summary NODE_TICKS GEN_TICKS ARGS... prints the run's CPU: seconds
# of the three nodes and of the load generator, and per GB of record
# payload (--records times --record-size) — it varies far less than wall
# time on a shared machine — or per record when that is under 10 MB.
cpu_summary() {
	local nt=$1 gt=$2 records=0 size=0
	shift 2
	while [ $# -gt 0 ]; do
		case $1 in
		--records) records=$2; shift ;;
		--record-size) size=$2; shift ;;
		esac
		shift
	done
	awk -v nt="$nt" -v gt="$gt" -v hz="$TICKS" -v n="$records" -v b="$size" 'BEGIN {
		cpu = (nt + gt) / hz; bytes = n * b
		printf "CPU nodes %.1f s + load generator %.1f s", nt / hz, gt / hz
		if (bytes >= 1e7) printf " = %.1f CPU-s/GB", cpu / (bytes / 1e9)
		else if (n > 0) printf " = %.0f CPU-µs/record", cpu * 1e6 / n
	}'
}

# run LABEL TOPIC ARGS...: one bench produce run, its summary (with its
# CPU, cpu_summary) kept. With ONLY set, runs whose label does not match
# that regular expression are skipped.
run() {
	local label=$1 name=$2
	shift 2
	if [[ -n $ONLY && ! $label =~ $ONLY ]]; then
		return
	fi
	topic "$name"
	echo "== $label" >&2
	local out n0 g0
	n0=$(node_ticks) g0=$(children_ticks)
	out=$("$BIN/sluice" bench produce --topic "$name" "$@" 2> >(grep -v '^produce:' >&2))
	out="$out; $(cpu_summary $(($(node_ticks) - n0)) $(($(children_ticks) - g0)) "$@")"
	echo "$out" >&2
	results+=("$label: $out")
	drop "$name"
}

# drop NAME: deletes the topic and waits until every node removed its logs,
# then syncs. Each run then starts without the previous runs' data: left
# behind, gigabytes of dirty page cache make the kernel throttle writers
# and flush in the background, stalling later runs (p99 in seconds).
drop() {
	"$BIN/sluice" topic delete "$1" >/dev/null
	for _ in $(seq 200); do # 20 s
		if ! compgen -G "$work/node*/logs/$1-*" >/dev/null; then
			sync
			return
		fi
		sleep 0.1
	done
	echo "topic $1: logs not removed within 20 s" >&2
	exit 1
}

run "100 B, acks=1" r100-acks1 --record-size 100 --acks 1 --records "$RECORDS_100"
profile=()
if [[ -n $PROFILE_DIR ]]; then
	mkdir -p "$PROFILE_DIR"
	"$GO" tool pprof -h >/dev/null 2>&1 || true # builds the tool now, not during the run
	# 8 s of node 1 (it leads a third of the partitions and follows the
	# rest) during the run that follows, and the load generator's own.
	(sleep 3 && "$GO" tool pprof -proto "http://127.0.0.1:$(port 1 3)/debug/pprof/profile?seconds=8" \
		>"$PROFILE_DIR/node1-acks-all-100.pb.gz" 2>/dev/null) &
	prof=$!
	profile=(--cpuprofile "$PROFILE_DIR/client-acks-all-100.pprof")
fi
run "100 B, acks=all" r100-acksall --record-size 100 --acks all --records "$RECORDS_100_ALL" "${profile[@]}"
if [[ -n $PROFILE_DIR ]]; then
	wait "$prof" || echo "CPU profile failed" >&2
	echo "CPU profiles in $PROFILE_DIR: go tool pprof -top $BIN/sluiced $PROFILE_DIR/node1-acks-all-100.pb.gz" >&2
fi
# Below saturation: the latency target is for 250,000 records/s (10 s).
run "100 B, acks=all, plain producer (no idempotence)" r100-acksall-plain --record-size 100 --acks all --no-idempotence --records "$RECORDS_100_ALL"
run "100 B, acks=all, --throughput $PACED_RATE" r100-acksall-paced --record-size 100 --acks all \
	--throughput "$PACED_RATE" --records $((PACED_RATE * 10))
run "1 KiB, acks=1" r1k-acks1 --record-size 1024 --acks 1 --records "$RECORDS_1K"
run "1 KiB, acks=all" r1k-acksall --record-size 1024 --acks all --records "$RECORDS_1K_ALL"
# One record at a time: each sent alone (linger 0), the next only after the
# previous is acknowledged; every record timed. Keyless records move from
# partition to partition, so all three leaders are used.
run "synchronous, 100 B, acks=all" r100-sync-all --record-size 100 --acks all --sync --records "$SYNC_RECORDS"
run "synchronous, 100 B, acks=1" r100-sync-1 --record-size 100 --acks 1 --sync --records "$SYNC_RECORDS"
# Transactions (issue 14): the same 100 B acks=all load in transactions
# committed every 10 ms, 100 ms and 1 s, next to an idempotent run of the
# same size before and after for the ratio; the latency reported is CommitTransaction's.
run "transactions: idempotent baseline, 100 B" r100-txn-base --record-size 100 --acks all --records "$RECORDS_TXN"
for every in 10ms 100ms 1s; do
	run "transactions: commit every $every, 100 B" "r100-txn-$every" --record-size 100 --acks all --records "$RECORDS_TXN" \
		--transactional-id "bench-$every" --commit-interval "$every"
done
# The baseline again: the ratio is to the mean of both (the machine's
# state drifts over a run: page cache, other load).
run "transactions: idempotent baseline again, 100 B" r100-txn-base2 --record-size 100 --acks all --records "$RECORDS_TXN"

# The two doors side by side (issue 34): one partition, 1 KiB records,
# acks=all, produced then consumed through the gRPC door (sluice bench)
# and through the Kafka door (franz-go: tools/kafkabench), and the Kafka
# door with lz4 and zstd. Each produce is followed by a consume of what it
# wrote.
door() {
	local label=$1 name=$2 tool=$3
	shift 3
	if [[ -n $ONLY && ! $label =~ $ONLY ]]; then
		return
	fi
	topic "$name" 1
	local out n0 g0 args=(--topic "$name" --records "$RECORDS_DOOR" --record-size 1024)
	for what in produce consume; do
		echo "== $label, $what" >&2
		n0=$(node_ticks) g0=$(children_ticks)
		if [[ $tool == grpc ]]; then
			if [[ $what == produce ]]; then
				out=$("$BIN/sluice" bench produce "${args[@]}" --acks all --partition 0 "$@" 2> >(grep -v '^produce:' >&2))
			else
				out=$("$BIN/sluice" bench consume --topic "$name" --records "$RECORDS_DOOR" 2>&1 | tail -1)
			fi
		else
			if [[ $what == produce ]]; then
				out=$("$BIN/kafkabench" produce --brokers "$kafka_brokers" "${args[@]}" --acks all --partition 0 "$@")
			else
				out=$("$BIN/kafkabench" consume --brokers "$kafka_brokers" --topic "$name" --records "$RECORDS_DOOR")
			fi
		fi
		out="$out; $(cpu_summary $(($(node_ticks) - n0)) $(($(children_ticks) - g0)) --records "$RECORDS_DOOR" --record-size 1024)"
		echo "$out" >&2
		results+=("$label, $what: $out")
	done
	drop "$name"
}
kafka_brokers=""
for i in 1 2 3; do kafka_brokers+="${kafka_brokers:+,}127.0.0.1:$(port "$i" 5)"; done
door "door: 1 KiB, acks=all, 1 partition, gRPC (sluice bench)" door-grpc grpc
door "door: 1 KiB, acks=all, 1 partition, Kafka (franz-go)" door-kafka kafka
door "door: 1 KiB, acks=all, 1 partition, Kafka (franz-go), lz4" door-kafka-lz4 kafka --compression lz4
door "door: 1 KiB, acks=all, 1 partition, Kafka (franz-go), zstd" door-kafka-zstd kafka --compression zstd

# Transactions through the Kafka door (issue 35): franz-go producing the
# same 100 B acks=all load as the gRPC transaction runs above, over
# $PARTITIONS partitions: idempotent; the control, idempotent flushed every
# 100 ms (the client's half of a commit: its loop waits for the flush, as a
# transactional producer's does before EndTxn); and in transactions
# committed every 100 ms (KIP-890 TV2). kafka_txn KIND LABEL NAME FLAGS...
# records each run's rate under KIND (base, flush, txn) for the summary.
declare -A door_txn_rates=()
kafka_txn() {
	local kind=$1 label=$2 name=$3
	shift 3
	if [[ -n $ONLY && ! $label =~ $ONLY ]]; then
		return
	fi
	topic "$name"
	echo "== $label" >&2
	local out n0 g0
	n0=$(node_ticks) g0=$(children_ticks)
	out=$("$BIN/kafkabench" produce --brokers "$kafka_brokers" --topic "$name" --records "$RECORDS_TXN" --record-size 100 --acks all "$@" $KAFKA_TXN_ARGS)
	if [[ -n $kind ]]; then
		door_txn_rates[$kind]+=" $(grep -o '[0-9]* records/s' <<<"$out" | cut -d' ' -f1)"
	fi
	out="$out; $(cpu_summary $(($(node_ticks) - n0)) $(($(children_ticks) - g0)) --records "$RECORDS_TXN" --record-size 100)"
	echo "$out" >&2
	results+=("$label: $out")
	drop "$name"
}
# Alternated after a warm-up (the first saturating run of a fresh cluster
# is the slowest whatever it runs: page cache, segment files, Go heaps):
# the summary compares the means of each kind.
kafka_txn "" "door transactions: Kafka (franz-go) warm-up (not a result), 100 B" door-txn-warm
for round in 1 2; do
	kafka_txn base "door transactions: Kafka (franz-go) idempotent baseline (round $round), 100 B" "door-txn-base-$round"
	kafka_txn flush "door transactions: Kafka (franz-go) idempotent flushed every 100ms, the control (round $round), 100 B" "door-txn-flush-$round" --flush-interval 100ms
	kafka_txn txn "door transactions: Kafka (franz-go) commit every 100ms (round $round), 100 B" "door-txn-100ms-$round" --transactional-id "bench-door-$round" --commit-interval 100ms
done
kafka_txn base "door transactions: Kafka (franz-go) idempotent baseline (round 3), 100 B" door-txn-base-3
# The summary needs every kind (ONLY may have left some out).
if [[ -n ${door_txn_rates[base]:-} && -n ${door_txn_rates[flush]:-} && -n ${door_txn_rates[txn]:-} ]]; then
	results+=("$(awk -v b="${door_txn_rates[base]}" -v f="${door_txn_rates[flush]}" -v t="${door_txn_rates[txn]}" '
		function mean(s,  a, n, i, sum) { n = split(s, a, " "); for (i = 1; i <= n; i++) sum += a[i]; return sum / n }
		BEGIN { mb = mean(b); mf = mean(f); mt = mean(t)
			printf "door transactions, means: idempotent %.0f, flushed every 100ms %.0f, transactions %.0f records/s; transactions/idempotent %.3f = flush/idempotent %.3f (the client'"'"'s flush) x transactions/flush %.3f (the transaction itself)", mb, mf, mt, mt / mb, mf / mb, mt / mf }')")
fi

echo
echo "Three nodes, RF 3, min.insync.replicas=2, $PARTITIONS partitions (the door runs: 1):"
for r in "${results[@]}"; do
	echo "  $r"
done
