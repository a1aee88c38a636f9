//go:build windows

package chaos

import "syscall"

// Windows has no SIGSTOP/SIGCONT: os.Process.Signal refuses these values
// with an error, so a copier member is never paused there (the pause is
// skipped as for a member that exited). The harness is meant for Unix;
// this file only keeps the module building everywhere (as
// internal/proccluster's sysproc_windows.go does).
const (
	sigStop = syscall.Signal(0x13)
	sigCont = syscall.Signal(0x12)
)
