package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/cluster/loopback"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestEnvNames(t *testing.T) {
	for flagName, want := range map[string]string{
		"data-dir":    "SLUICE_DATA_DIR",
		"listen":      "SLUICE_LISTEN",
		"http-listen": "SLUICE_HTTP_LISTEN",
		"node-id":     "SLUICE_NODE_ID",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

func TestBadFlagsAndEnvAreRejected(t *testing.T) {
	if err := run([]string{"--node-id", "-4", "--data-dir", t.TempDir()}); err == nil {
		t.Error("negative node id accepted")
	}
	if err := run([]string{"--listen", "no-port", "--data-dir", t.TempDir()}); err == nil {
		t.Error("listen address without a port accepted")
	}
	if err := run([]string{"stray-arg"}); err == nil {
		t.Error("stray argument accepted")
	}
	for _, bad := range []struct{ value, want string }{
		{"127.0.0.1:9501", "want from=to"},
		{"127.0.0.1:9501=127.0.0.1", "missing port"},
		{"127.0.0.1:9501=127.0.0.1:1,127.0.0.1:9501=127.0.0.1:2", "mapped twice"},
	} {
		err := run([]string{"--fault-dial-map", bad.value, "--data-dir", t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "--fault-dial-map") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--fault-dial-map %q: got %v, want an error naming the flag and %q", bad.value, err, bad.want)
		}
	}
	if err := run([]string{"--fault-injection", "--http-listen", "", "--data-dir", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "http listen") {
		t.Errorf("--fault-injection without an HTTP listener: got %v", err)
	}
	t.Setenv("SLUICE_NODE_ID", "not-a-number")
	if err := run(nil); err == nil {
		t.Error("bad SLUICE_NODE_ID accepted")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// SIGTERM shuts sluiced down gracefully: exit status 0, and every log gets
// its clean-shutdown marker so the next start skips the recovery scan. The
// configuration comes from SLUICE_* variables only.
func TestSIGTERMShutsDownCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sluiced binary")
	}
	bin := filepath.Join(t.TempDir(), "sluiced")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SLUICE_DATA_DIR="+dir, "SLUICE_LISTEN="+grpcAddr, "SLUICE_HTTP_LISTEN="+httpAddr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluiced not ready: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	resp, err := sluicev1.NewAdminClient(conn).CreateTopics(cctx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 2, ReplicationFactor: 1}}})
	if err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create topic: %v %v", err, resp)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sluiced exited with %v after SIGTERM\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("sluiced did not stop within 20s of SIGTERM\n%s", stderr.String())
	}
	if !bytes.Contains(stderr.Bytes(), []byte("sluice node stopped")) {
		t.Fatalf("no graceful-stop log line:\n%s", stderr.String())
	}
	for p := 0; p < 2; p++ {
		marker := filepath.Join(dir, "logs", fmt.Sprintf("t-%d", p), ".clean_shutdown")
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("partition %d has no clean-shutdown marker: %v", p, err)
		}
	}
}
