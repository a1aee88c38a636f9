package proccluster

import "syscall"

// sysProcAttr puts a node in its own process group (a signal meant for
// the harness, such as a terminal's Ctrl-C, does not reach it: the harness
// stops its nodes itself) and has the kernel SIGKILL it when the harness
// dies without cleaning up (a test binary killed at its timeout), so that
// no node outlives the harness holding ports it no longer claims.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// The signals that pause and resume a node.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)
