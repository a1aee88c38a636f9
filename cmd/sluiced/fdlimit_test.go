package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/node"
)

// fdlimitChild is set in the subprocess of
// TestOpenFilesLimitIsRaisedAtStart.
const fdlimitChild = "SLUICED_TEST_FDLIMIT_CHILD"

// Issue 29: sluiced runs with its soft open-files limit raised to the
// hard one, and logs both. The Go runtime does the raising (syscall's
// init), so sluiced does not: a process started with a soft limit of 256
// logs a soft limit of at least the hard one less one. Should a Go
// release stop raising it, this fails, and sluiced must raise it itself.
func TestOpenFilesLimitIsRaisedAtStart(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("RLIMIT_NOFILE is a Unix limit")
	}
	if os.Getenv(fdlimitChild) == "" {
		// The shell lowers the soft limit for the process it runs: this
		// test binary again, which logs what it got.
		cmd := exec.Command("sh", "-c", `ulimit -Sn 256 && exec "$0" -test.run='^TestOpenFilesLimitIsRaisedAtStart$'`, os.Args[0])
		cmd.Env = append(os.Environ(), fdlimitChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("subprocess: %v\n%s", err, out)
		}
		t.Logf("subprocess:\n%s", out)
		return
	}
	var buf bytes.Buffer
	logOpenFilesLimit(slog.New(slog.NewJSONHandler(&buf, nil)), node.DefaultConfig())
	var rec struct {
		Msg            string
		Soft, Hard     uint64
		MaxConnections int `json:"max_connections"`
	}
	line, _, _ := strings.Cut(buf.String(), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if rec.Hard == 0 || rec.Soft+1 < rec.Hard || rec.Soft <= 256 && rec.Hard > 257 {
		t.Fatalf("started with a soft limit of 256, the process has soft %d, hard %d: not raised", rec.Soft, rec.Hard)
	}
	if rec.MaxConnections == 0 || uint64(rec.MaxConnections) > rec.Soft {
		t.Fatalf("max_connections %d logged with soft limit %d", rec.MaxConnections, rec.Soft)
	}
	os.Stdout.WriteString(buf.String())
}
