package main

import (
	"fmt"
	"os"
	"syscall"
)

// applySysmonSetting re-executes this program, in place (same process id
// and arguments), with sysmonGODEBUG in its environment, unless GODEBUG
// already names schedtrace: the runtime reads GODEBUG only at start. It
// returns only when there is nothing to do or the exec failed (said on
// stderr; the node then runs with the Go default).
func applySysmonSetting() {
	env, ok := sysmonEnv(os.Environ())
	if !ok {
		return
	}
	// The binary's own path, not /proc/self/exe: the process's name
	// (/proc/PID/comm, what ps, pgrep and container tooling show) is the
	// exec'd file's base name.
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintf(os.Stderr, "sluiced: running without GODEBUG=%s (re-executing with it failed: %v)\n", sysmonGODEBUG, err)
}
