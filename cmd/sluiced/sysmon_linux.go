package main

import (
	"fmt"
	"os"
	"syscall"
)

// applySysmonSetting re-executes this program, in place (same process id,
// arguments), with sysmonGODEBUG in its environment, unless
// GODEBUG already names schedtrace: the runtime reads GODEBUG only at
// start. It returns only when there is nothing to do or the exec failed
// (said on stderr; the node then runs with the Go default).
func applySysmonSetting() {
	env, ok := sysmonEnv(os.Environ())
	if !ok {
		return
	}
	// /proc/self/exe is this process's binary even if its path has since
	// been replaced (an upgrade in progress).
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	fmt.Fprintf(os.Stderr, "sluiced: running without GODEBUG=%s (re-executing with it failed: %v)\n", sysmonGODEBUG, err)
}
