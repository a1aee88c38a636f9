package chaos

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A copier instance may run as a process of its own: a group copier
// member (copier_member.go) or a librdkafka copier's txn_copier.py
// (rdk_copier.go). This file is what both do with such a process:
// start it with its stdout read to the end by a goroutine and its
// stderr's tail kept, and stop it by SIGKILL or SIGTERM.

// copierTermPatience is how long a copier process may take to stop on
// SIGTERM (end its transaction, leave its group) before it is killed.
const copierTermPatience = 30 * time.Second

// copierProcess is a started copier process.
type copierProcess struct {
	cmd *exec.Cmd
	// stderr keeps the last 4 KiB the process wrote to its stderr.
	stderr *tailBuffer
	// exited closes once the process's stdout has been read to its end
	// and the process has been waited for: cmd.ProcessState is set then.
	exited chan struct{}
}

// startCopierProcess starts cmd and runs read(its stdout) on a goroutine
// of its own, which then waits for the process to exit. read should
// consume the output to its end: Wait closes the pipe. cmd's Stdout and
// Stderr must not be set.
func startCopierProcess(cmd *exec.Cmd, read func(io.Reader)) (*copierProcess, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &copierProcess{cmd: cmd, stderr: &tailBuffer{max: 4 << 10}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		read(stdout) // before Wait, which closes stdout
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill SIGKILLs the process (a stopped one too) and waits until it has
// exited.
func (p *copierProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// term stops the process with SIGTERM and waits until it has exited; it
// kills it after copierTermPatience and then reports false.
func (p *copierProcess) term() bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(copierTermPatience):
		p.kill()
		return false
	}
}

// signal sends sig to the process.
func (p *copierProcess) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// failed returns the process's state when it exited unsuccessfully, else
// nil; it must be called after exited closed.
func (p *copierProcess) failed() *os.ProcessState {
	if st := p.cmd.ProcessState; st != nil && !st.Success() {
		return st
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
