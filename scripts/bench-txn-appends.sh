#!/usr/bin/env bash
# Measures the transaction coordinator's __transaction_state appends under
# a saturating transactional load through the Kafka door (decision 78):
# starts a three-node cluster (scripts/cluster.sh), then RUNS times
# creates a topic (6 partitions, RF 3, min.insync.replicas=2), runs
# franz-go (tools/kafkabench) producing RECORDS records of 100 B in
# transactions committed every 100 ms, and prints the run's rate and the
# appends' count and mean time (sluice_txn_coordinator_append_seconds,
# all three nodes, before and after the run); stops the cluster.
#
#   scripts/bench-txn-appends.sh
#   RUNS=5 RECORDS=9000000 BASE_PORT=19800 scripts/bench-txn-appends.sh
#
# The first run of a fresh cluster is slower than the rest (page cache,
# Go heaps): compare the later ones. To see the appends on a link with
# less bandwidth than loopback, limit lo while it runs (as root; every
# node and the client share the one link):
#   tc qdisc add dev lo root tbf rate 2gbit burst 256kb latency 20ms
#   ... ; tc qdisc del dev lo root
#
# Environment: RUNS (3), RECORDS (6000000), BASE_PORT (19800), DIR
# (a new temporary directory, removed after), BIN (bin).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
RECORDS=${RECORDS:-6000000}
export BASE_PORT=${BASE_PORT:-19800}
BIN=${BIN:-bin}
export BIN
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-txn-appends.XXXXXX")
export DIR=${DIR:-$work/cluster}
trap 'scripts/cluster.sh stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

port() { echo $((BASE_PORT + 10 * $1 + $2)); }
scripts/cluster.sh start >&2
go build -o "$BIN/kafkabench" ./tools/kafkabench
export SLUICE_BROKERS="127.0.0.1:$(port 1 0)"
brokers="127.0.0.1:$(port 1 5),127.0.0.1:$(port 2 5),127.0.0.1:$(port 3 5)"

# appends prints the sum (s) and count of the three nodes' appends.
appends() {
	for i in 1 2 3; do curl -fs "http://127.0.0.1:$(port "$i" 3)/metrics"; done | awk '
		/^sluice_txn_coordinator_append_seconds_sum/ { s += $2 }
		/^sluice_txn_coordinator_append_seconds_count/ { n += $2 }
		END { printf "%f %d\n", s, n }'
}

for r in $(seq 1 "$RUNS"); do
	"$BIN/sluice" topic create "txn-appends-$r" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
	read -r s0 n0 <<<"$(appends)"
	out=$("$BIN/kafkabench" produce --brokers "$brokers" --topic "txn-appends-$r" --records "$RECORDS" --record-size 100 \
		--acks all --transactional-id "txn-appends-$r" --commit-interval 100ms)
	read -r s1 n1 <<<"$(appends)"
	rate=$(grep -o '[0-9]* records/s' <<<"$out")
	txns=$(grep -o '[0-9]* transactions committed' <<<"$out")
	awk -v r="$r" -v rate="$rate" -v txns="$txns" -v s0="$s0" -v n0="$n0" -v s1="$s1" -v n1="$n1" 'BEGIN {
		n = n1 - n0
		printf "run %d: %s, %s, %d __transaction_state appends, mean %.2f ms\n", r, rate, txns, n, n ? (s1 - s0) / n * 1000 : 0 }'
	"$BIN/sluice" topic delete "txn-appends-$r" >/dev/null
done
