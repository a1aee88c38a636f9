package proccluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// Node is one sluiced of a Cluster. Its ports, roles and directories never
// change: a restarted node comes back on the same Raft and gossip
// addresses (they are in the quorum configuration and in other nodes'
// gossip state) and the same data.
type Node struct {
	ID      int32
	Roles   []string
	DataDir string
	LogPath string // every incarnation's output, appended
	// Listen is the client gRPC listener (the public services),
	// InternalListen the internal one (the inter-node services, decision
	// 41), KafkaListen the Kafka-protocol one (issue 34; brokers open it).
	Listen, InternalListen, KafkaListen, HTTP, RaftListen, GossipListen string

	mu       sync.Mutex // guards the following
	cmd      *exec.Cmd  // the current or last process; nil before the first start
	exited   chan struct{}
	status   string // exit status of the last process, once it has exited
	paused   bool
	stopping bool // the harness asked the current process to stop
	starts   int
}

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running()
}

func (n *Node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the node is stopped with SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// exitStatus returns the last process's exit status and true once it has
// exited (or was never started: "not started").
func (n *Node) exitStatus() (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return "not started", true
	}
	if n.running() {
		return "", false
	}
	return n.status, true
}

// markStopping records that the harness stops the current process and
// returns its exit channel; false if it is not running.
func (n *Node) markStopping() (<-chan struct{}, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running() {
		return nil, false
	}
	n.stopping = true
	return n.exited, true
}

// signal sends sig to the current process.
func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running() {
		return fmt.Errorf("proccluster: node %d is not running", n.ID)
	}
	return n.cmd.Process.Signal(sig)
}

// setPaused SIGSTOPs (true) or SIGCONTs (false) the current process.
func (n *Node) setPaused(paused bool) error {
	sig := sigCont
	if paused {
		sig = sigStop
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running() {
		return fmt.Errorf("proccluster: %v node %d: not running", sig, n.ID)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("proccluster: %v node %d: %w", sig, n.ID, err)
	}
	n.paused = paused
	return nil
}

// tailLines is how many log lines an error carries.
const tailLines = 40

func (n *Node) tailForError() string {
	return fmt.Sprintf("log %s (tail):\n%s", n.LogPath, n.LogTail(tailLines))
}

// maxTailBytes is how much of the end of a log LogTail reads.
const maxTailBytes = 1 << 20

// LogTail returns the last lines of the node's log, leaving out the
// "connection refused" lines that Raft and the brokers repeat many times a
// second while a peer is down (it counts them instead), which would
// otherwise push everything else out of the tail.
func (n *Node) LogTail(lines int) string {
	f, err := os.Open(n.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)\n", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxTailBytes {
		_, _ = f.Seek(st.Size()-maxTailBytes, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	var keep []string
	dropped := 0
	for _, l := range strings.SplitAfter(string(bytes.TrimRight(data, "\n"))+"\n", "\n") {
		if l == "" {
			continue
		}
		if strings.Contains(l, "connection refused") {
			dropped++
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > lines {
		keep = keep[len(keep)-lines:]
	}
	return fmt.Sprintf("(%d \"connection refused\" lines left out)\n%s", dropped, strings.Join(keep, ""))
}
