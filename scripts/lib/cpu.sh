# Shell helper for the benchmark scripts (scripts/bench-cluster.sh,
# scripts/bench-jetstream.sh). Source it.

# cpu_ticks PID... prints the CPU time (user + system, clock ticks) the
# processes have used so far, from /proc.
cpu_ticks() {
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
