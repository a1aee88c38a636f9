#!/usr/bin/env bash
# `make examples`: runs the Python and Node.js clients of examples/ against
# a real single-node sluiced and fails if either does (examples/README.md).
#
#  1. checks the tools, naming the Debian package of any that is missing
#     (never skips): /usr/bin/python3 with python3-grpcio and
#     python3-grpc-tools, node (nodejs) and npm (npm);
#  2. runs `npm ci` in examples/node when node_modules is missing or older
#     than package-lock.json;
#  3. builds bin/sluiced and starts one combined node on 127.0.0.1 with
#     every listener on port 0 (it prints the bound addresses in its
#     "sluice node started" log line) and its data in a temporary
#     directory, and waits until /readyz answers 200;
#  4. runs both examples against it, then stops it (trap on EXIT).
#
# Environment: GO (go), BIN (bin), PYTHON (/usr/bin/python3: the
# interpreter Debian's python3-* packages install for), NODE (node), NPM
# (npm), EXAMPLE_TIMEOUT (120: seconds per example), KEEP=1 keeps the
# temporary directory (data and sluiced.log).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
NODE=${NODE:-node}
NPM=${NPM:-npm}
EXAMPLE_TIMEOUT=${EXAMPLE_TIMEOUT:-120}

die() {
  echo "examples: $*" >&2
  exit 1
}

# shellcheck source=scripts/lib/node.sh
. scripts/lib/node.sh

# 1. Tools. Each message names what to install; .ci/run installs them all.
missing=()
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  missing+=("$PYTHON not found: install Debian's python3 (apt-get install python3)")
else
  "$PYTHON" -c 'import grpc' >/dev/null 2>&1 ||
    missing+=("$PYTHON cannot import grpc: install Debian's python3-grpcio (apt-get install python3-grpcio)")
  "$PYTHON" -c 'import grpc_tools.protoc' >/dev/null 2>&1 ||
    missing+=("$PYTHON cannot import grpc_tools: install Debian's python3-grpc-tools (apt-get install python3-grpc-tools)")
fi
command -v "$NODE" >/dev/null 2>&1 ||
  missing+=("$NODE not found: install Debian's nodejs (apt-get install nodejs)")
command -v "$NPM" >/dev/null 2>&1 ||
  missing+=("$NPM not found: install Debian's npm (apt-get install npm)")
command -v timeout >/dev/null 2>&1 ||
  missing+=("timeout not found: install Debian's coreutils")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'examples: %s\n' "${missing[@]}" >&2
  die "missing tools (see above); .ci/run installs them"
fi

# 2. The Node example's dependencies, pinned by examples/node/package-lock.json.
if [ ! -f examples/node/node_modules/.package-lock.json ] ||
  [ examples/node/package-lock.json -nt examples/node/node_modules/.package-lock.json ]; then
  echo "examples: npm ci in examples/node"
  (cd examples/node && "$NPM" ci --ignore-scripts --no-audit --no-fund) ||
    die "npm ci in examples/node failed (the npm registry must be reachable, or its cache filled)"
fi

# 3. One node, on free loopback ports, data in a temporary directory.
mkdir -p "$BIN"
"$GO" build -o "$BIN/sluiced" ./cmd/sluiced

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-examples.XXXXXX")
nodelog="$work/sluiced.log"
pid=""
cleanup() {
  local rc=$?
  [ -z "$pid" ] || stop_process "$pid" sluiced
  finish_work $rc examples "$work" "$nodelog"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# No SLUICE_* variable of the caller's may configure this node (sluiced
# reads every flag from one), and flags fix all the addresses.
for v in $(compgen -e | grep '^SLUICE_' || true); do unset "$v"; done
"$BIN/sluiced" --node-id 1 --data-dir "$work/data" \
  --listen 127.0.0.1:0 --internal-listen 127.0.0.1:0 --raft-listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --kafka-listen 127.0.0.1:0 \
  >"$nodelog" 2>&1 &
pid=$!

wait_ready "$pid" "$nodelog"
echo "examples: sluiced ready: gRPC $addr, HTTP $http, data in $work/data"

# 4. Both examples, even if the first fails; any failure fails the run.
failed=()
run() {
  local name=$1
  shift
  local start=$SECONDS rc=0
  echo "examples: --- $name"
  timeout "$EXAMPLE_TIMEOUT" "$@" --bootstrap "$addr" || rc=$?
  if [ $rc -eq 124 ]; then
    echo "examples: $name did not finish within $EXAMPLE_TIMEOUT s" >&2
  fi
  if [ $rc -ne 0 ]; then
    echo "examples: $name FAILED (exit $rc, $((SECONDS - start)) s)" >&2
    failed+=("$name")
  else
    echo "examples: $name passed ($((SECONDS - start)) s)"
  fi
}
run python "$PYTHON" examples/python/sluice_example.py
run node "$NODE" examples/node/sluice_example.js

if [ ${#failed[@]} -gt 0 ]; then
  die "failed: ${failed[*]}"
fi
echo "examples: all passed"
