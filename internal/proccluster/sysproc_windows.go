//go:build windows

package proccluster

import "syscall"

// sysProcAttr: Windows has no process groups of the Unix kind; the harness
// still stops its nodes itself.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// Windows has no SIGSTOP/SIGCONT: os.Process.Signal refuses these values
// with an error, so Pause and Resume fail there (as does SIGTERM: Stop
// falls back to killing). The harness is meant for Unix; this file only
// keeps the module building everywhere.
const (
	sigStop = syscall.Signal(0x13)
	sigCont = syscall.Signal(0x12)
)
