#!/usr/bin/env bash
# Runs the chaos harness against a fresh local cluster of real sluiced
# processes. Usage: scripts/chaos.sh [sluice-chaos flags], e.g.
#   scripts/chaos.sh --duration 10m --seed 42
#   scripts/chaos.sh --duration 2m --faults kill:leader,partition,pause
#   scripts/chaos.sh --duration 5m --security tls+scram
# `make chaos` runs it with CHAOS_DURATION and CHAOS_SEED. See docs/chaos.md.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mkdir -p bin
# The nodes need the testing flags (--fault-injection, --fault-dial-map):
# a sluiced built with the sluicetest tag (docs/design.md decision 52),
# kept apart from the bin/sluiced that make build leaves.
$GO build -tags sluicetest -o bin/sluiced-sluicetest ./cmd/sluiced
$GO build -o bin/sluice-chaos ./cmd/sluice-chaos
exec bin/sluice-chaos --sluiced "$PWD/bin/sluiced-sluicetest" "$@"
