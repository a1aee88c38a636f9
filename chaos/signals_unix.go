//go:build unix

package chaos

import "syscall"

// The signals that pause a copier member into a zombie and resume it.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)
