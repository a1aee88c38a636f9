//go:build unix

package storage

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// emfileChild is set in the subprocess of TestRealFileDescriptorExhaustion.
const emfileChild = "SLUICE_STORAGE_TEST_EMFILE_CHILD"

// Issue 29, with the real limit (RLIMIT_NOFILE, a Unix limit): in a subprocess (the limit and the
// hoarded descriptors must not disturb other tests), descriptors are taken
// until open(2) fails with EMFILE. The high-watermark checkpoint and a
// roll then fail with a resource error and the log stays online; once the
// descriptors are closed both succeed and the log reopens with everything
// written.
func TestRealFileDescriptorExhaustion(t *testing.T) {
	if os.Getenv(emfileChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRealFileDescriptorExhaustion$", "-test.v")
		cmd.Env = append(os.Environ(), emfileChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("subprocess: %v\n%s", err, out)
		}
		t.Logf("subprocess:\n%s", out)
		return
	}

	dir := t.TempDir()
	var offline, resource failures
	l, err := OpenWith(dir, testConfig(), t0, Options{OnFailure: offline.record, OnResourceError: resource.record})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 3, 3, 10)
	l.SetHighWatermark(l.EndOffset())

	// A low soft limit makes exhausting it quick.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = min(lim.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var hoard []*os.File
	release := func() {
		for _, f := range hoard {
			f.Close()
		}
		hoard = nil
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("hoarding descriptors: %v", err)
			}
			break
		}
		hoard = append(hoard, f)
	}
	t.Logf("hoarded %d descriptors up to the soft limit %d", len(hoard), low.Cur)

	checkResourceErr(t, l, l.CheckpointHighWatermark(), syscall.EMFILE)
	var rollErr error
	for i := 0; i < 200 && rollErr == nil; i++ {
		_, rollErr = l.Append(makeBatch(5, 200+int64(i), "roll"), fillEpoch, t0)
	}
	checkResourceErr(t, l, rollErr, syscall.EMFILE)
	if got := offline.all(); len(got) != 0 {
		t.Fatalf("OnFailure heard %v", got)
	}
	if len(resource.all()) < 2 {
		t.Fatalf("OnResourceError heard %v, want the checkpoint and the roll", resource.all())
	}

	release()
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatalf("checkpoint with descriptors free: %v", err)
	}
	if _, err := l.Append(makeBatch(5, 900, "rolled"), fillEpoch, t0); err != nil {
		t.Fatalf("append (roll) with descriptors free: %v", err)
	}
	end := l.EndOffset()
	want := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, testConfig())
	defer r.Close()
	if r.EndOffset() != end || len(readAll(t, r)) != len(want) {
		t.Fatalf("reopened: end %d, %d batches; want %d, %d", r.EndOffset(), len(readAll(t, r)), end, len(want))
	}
}
