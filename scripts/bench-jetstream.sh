#!/usr/bin/env bash
# NATS JetStream on the same terms as scripts/bench-cluster.sh, for the side-by-side figures in
# docs/benchmarks.md (issue 19): three servers on loopback, one R3 file stream, one publisher.
#
# Installs nats-server and the nats CLI with `go install` (pinned versions, from the Go module
# proxy) into $NATS_BIN unless they are there, starts three clustered servers with temporary
# data directories, and runs
#   - a synchronous publish of 100-byte messages (each sent when the previous is acknowledged:
#     the counterpart of `sluice bench produce --sync --acks all`), and
#   - an asynchronous publish of 1 KiB messages (the counterpart of the 1 KiB acks=all run),
# printing nats bench's own summary line for each, with the CPU the three servers and the
# publisher used (user + system from /proc) per GB of payload or per message. The servers
# are stopped (SIGTERM) and the data removed at the end.
#
#   scripts/bench-jetstream.sh
#   SYNC_MSGS=20000 MSGS_1K=1000000 scripts/bench-jetstream.sh
#
# Environment: NATS_BIN (.cache/nats), BASE_PORT (14220: server i listens on BASE_PORT+i
# and routes on BASE_PORT+2000+i), SYNC_MSGS (5000), MSGS_1K (500000), ROUNDS (1: each
# run is repeated this many times), NODE_GOMAXPROCS (each server's GOMAXPROCS; default
# nproc/3, at least 1, as `make cluster` gives Sluice's nodes), KEEP=1 (keep data and logs),
# GO (go).
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
NATS_BIN=${NATS_BIN:-.cache/nats}
BASE_PORT=${BASE_PORT:-14220}
SYNC_MSGS=${SYNC_MSGS:-5000}
MSGS_1K=${MSGS_1K:-500000}
ROUNDS=${ROUNDS:-1}
NODE_GOMAXPROCS=${NODE_GOMAXPROCS:-$(($(nproc) / 3 > 1 ? $(nproc) / 3 : 1))}
NATS_SERVER_VERSION=v2.15.3
NATSCLI_VERSION=v0.5.0

mkdir -p "$NATS_BIN"
NATS_BIN=$(cd "$NATS_BIN" && pwd)
if [ ! -x "$NATS_BIN/nats-server" ]; then
	echo "installing nats-server $NATS_SERVER_VERSION into $NATS_BIN" >&2
	GOBIN="$NATS_BIN" "$GO" install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
fi
if [ ! -x "$NATS_BIN/nats" ]; then
	echo "installing the nats CLI $NATSCLI_VERSION into $NATS_BIN" >&2
	GOBIN="$NATS_BIN" "$GO" install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-jetstream.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "${KEEP:-}" = 1 ]; then
		echo "kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

routes=""
for i in 1 2 3; do
	routes="$routes${routes:+, }nats-route://127.0.0.1:$((BASE_PORT + 2000 + i))"
done
for i in 1 2 3; do
	cat >"$work/n$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:$((BASE_PORT + i))
jetstream { store_dir: "$work/data-$i" }
cluster {
  name: bench
  listen: 127.0.0.1:$((BASE_PORT + 2000 + i))
  routes: [$routes]
}
EOF
	GOMAXPROCS=$NODE_GOMAXPROCS "$NATS_BIN/nats-server" -c "$work/n$i.conf" >"$work/n$i.log" 2>&1 &
	pids+=($!)
done
server="nats://127.0.0.1:$((BASE_PORT + 1))"
nats() { "$NATS_BIN/nats" -s "$server" "$@"; }

# Wait until JetStream has a meta leader (a stream can be created).
ok=0
for _ in $(seq 1 100); do
	if nats stream add probe --subjects probe --replicas 3 --storage file --defaults >/dev/null 2>&1; then
		nats stream rm probe -f >/dev/null 2>&1 || true
		ok=1
		break
	fi
	sleep 0.2
done
if [ $ok != 1 ]; then
	echo "JetStream did not come up; the end of the first server's log:" >&2
	tail -20 "$work/n1.log" >&2
	exit 1
fi

# shellcheck source=scripts/lib/cpu.sh
. scripts/lib/cpu.sh
hz=$(getconf CLK_TCK)

# run LABEL UNIT COUNT BYTES ARGS...: one nats bench run, with CPU per unit.
run() {
	local label=$1 unit=$2 count=$3 bytes=$4
	shift 4
	local before after client line
	before=$(cpu_ticks "${pids[@]}")
	line=$({ /usr/bin/time -f "CLIENT %U %S" "$NATS_BIN/nats" -s "$server" bench "$@" --no-progress; } 2>&1 | grep -E "stats:|^CLIENT")
	after=$(cpu_ticks "${pids[@]}")
	client=$(echo "$line" | awk '/^CLIENT/ {print $2 + $3}')
	awk -v label="$label" -v unit="$unit" -v count="$count" -v bytes="$bytes" -v nodes="$(((after - before)))" -v hz="$hz" -v client="$client" \
		-v stats="$(echo "$line" | grep stats: | sed 's/.*stats: //')" 'BEGIN {
		n = nodes / hz
		if (unit == "GB") { per = (n + client) / (count * bytes / 1e9); printf "  %s: %s; CPU servers %.1f s + publisher %.1f s = %.1f CPU-s/GB\n", label, stats, n, client, per }
		else { per = (n + client) / count * 1e6; printf "  %s: %s; CPU servers %.1f s + publisher %.1f s = %.0f CPU-us/message\n", label, stats, n, client, per }
	}'
}

echo
echo "NATS JetStream $NATS_SERVER_VERSION, three servers (GOMAXPROCS=$NODE_GOMAXPROCS), R3 file streams:"
for r in $(seq 1 "$ROUNDS"); do
	run "synchronous, 100 B (round $r)" msg "$SYNC_MSGS" 100 \
		js pub sync bench.sync --stream sync$r --create --replicas 3 --storage file --msgs "$SYNC_MSGS" --size 100
	run "asynchronous, 1 KiB (round $r)" GB "$MSGS_1K" 1024 \
		js pub async bench.k --stream k$r --create --replicas 3 --storage file --maxbytes 4GB --msgs "$MSGS_1K" --size 1024
	nats stream rm "sync$r" -f >/dev/null 2>&1 || true
	nats stream rm "k$r" -f >/dev/null 2>&1 || true
done
