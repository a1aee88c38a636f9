// Package e2e holds the end-to-end suites: real sluiced processes on
// loopback (started, killed, paused and restarted through
// internal/proccluster, the project's one multi-process harness), driven
// through the sluice CLI and the Go client. The package has tests only;
// the binaries are built once per test run.
//
//	go test -race -count=1 ./e2e/ -run TestClusterControllerLeaderKilled
//	go test -run '^$' -bench BenchmarkFailover -benchtime 5x ./e2e/
package e2e
