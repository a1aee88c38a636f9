package loopback

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Addresses are distinct across calls, below the ephemeral range, and
// bindable for TCP and UDP.
func TestFreeAddrs(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addrs, err := FreeAddrs(5)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 5 {
			t.Fatalf("got %d addresses, want 5", len(addrs))
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			host, p, err := net.SplitHostPort(a)
			if err != nil || host != "127.0.0.1" {
				t.Fatalf("address %q", a)
			}
			port, _ := strconv.Atoi(p)
			if port < minPort || port >= maxPort {
				t.Fatalf("port %d outside [%d, %d)", port, minPort, maxPort)
			}
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("TCP %s: %v", a, err)
			}
			u, err := net.ListenPacket("udp", a)
			if err != nil {
				t.Fatalf("UDP %s: %v", a, err)
			}
			l.Close()
			u.Close()
		}
	}
}

// A port in use is never handed out.
func TestFreeAddrsSkipsPortsInUse(t *testing.T) {
	var held []net.Listener
	for p := minPort; p < minPort+200; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			held = append(held, l)
		}
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	inUse := map[string]bool{}
	for _, l := range held {
		inUse[l.Addr().String()] = true
	}
	addrs, err := FreeAddrs(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if inUse[a] {
			t.Fatalf("%s is in use, yet handed out", a)
		}
	}
}

// A port another live process claimed is not handed out; a claim left by
// a process that exited is taken over; this process's own claim holds.
func TestClaimsAcrossProcesses(t *testing.T) {
	saved := claimDir
	claimDir = t.TempDir()
	t.Cleanup(func() { claimDir = saved })

	if err := os.WriteFile(filepath.Join(claimDir, "20001"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if claim(20001) {
		t.Fatal("a port claimed by a live process (pid 1) was claimed again")
	}
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	stale := strconv.Itoa(done.Process.Pid)
	if err := os.WriteFile(filepath.Join(claimDir, "20002"), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	if !claim(20002) {
		t.Fatalf("a claim of exited process %s was not taken over", stale)
	}
	if data, _ := os.ReadFile(filepath.Join(claimDir, "20002")); string(data) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("claim file holds %q, want this process's id", data)
	}
	if claim(20002) {
		t.Fatal("this process's own claim was made twice")
	}
}
