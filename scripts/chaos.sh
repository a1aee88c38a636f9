#!/usr/bin/env bash
# Runs the chaos harness against a fresh local cluster of real sluiced
# processes. Usage: scripts/chaos.sh [sluice-chaos flags], e.g.
#   scripts/chaos.sh --duration 10m --seed 42
#   scripts/chaos.sh --duration 2m --faults kill:leader,partition,pause
# `make chaos` runs it with CHAOS_DURATION and CHAOS_SEED. See docs/chaos.md.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mkdir -p bin
$GO build -o bin/sluiced ./cmd/sluiced
$GO build -o bin/sluice-chaos ./cmd/sluice-chaos
exec bin/sluice-chaos --sluiced "$PWD/bin/sluiced" "$@"
