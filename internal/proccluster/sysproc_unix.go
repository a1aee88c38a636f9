//go:build unix && !linux

package proccluster

import "syscall"

// sysProcAttr puts a node in its own process group: a signal meant for
// the harness does not reach it; the harness stops its nodes itself.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// The signals that pause and resume a node.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)
