package main

import (
	"errors"
	"strings"
	"testing"
)

// Issue 15, input checks: flags that make no sense are refused before
// any broker is contacted, and the error names the flag that fixes it.
func TestConsumeOffsetAndPartitionChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partition", "0", "--offset", "-5"}, "--offset must be 0 or more, got -5"},
		{[]string{"--offset", "3"}, "--offset needs --partition"},
		{[]string{"--partition", "-2"}, "--partition must be 0 or more, got -2"},
		{[]string{"--partition", "0", "--offset", "2", "--from-beginning"}, "--from-beginning and --offset exclude each other"},
	} {
		args := append([]string{"--brokers", "127.0.0.1:1", "consume", "m"}, tc.args...)
		_, _, err := runArgs(t, args...)
		if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A line longer than --max-line-bytes fails produce with an error naming
// the flag; in a transaction, the open transaction (holding the lines
// before it) is aborted, not committed.
func TestProduceLongLineNamesTheFlagAndAbortsTheTransaction(t *testing.T) {
	f := startFakeTxnBroker(t)
	input := "a\nb\n" + strings.Repeat("x", 64) + "\nc\n"
	_, _, err := runWithStdin(t, input, "--brokers", f.addr, "produce", "m", "--transactional-id", "tx", "--max-line-bytes", "16")
	if err == nil || !strings.Contains(err.Error(), "line 3 is longer than 16 bytes (raise --max-line-bytes)") ||
		!strings.Contains(err.Error(), "was aborted") {
		t.Fatalf("produce with a long line: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ends) != 1 || f.ends[0].Committed {
		t.Errorf("EndTxn calls %v, want one abort", f.ends)
	}

	// Without a transaction the lines before it are sent, and the error
	// says how many.
	f2 := startFakeTxnBroker(t)
	_, _, err = runWithStdin(t, input, "--brokers", f2.addr, "produce", "m", "--max-line-bytes", "16")
	if err == nil || !strings.Contains(err.Error(), "(raise --max-line-bytes) (2 of the 2 records before it were acknowledged)") {
		t.Fatalf("produce with a long line, no transaction: %v", err)
	}
}

// dump-log refuses a file that is not a segment (or its .txnindex),
// saying what it wants.
func TestDumpLogRefusesWhatIsNotASegment(t *testing.T) {
	_, _, err := runArgs(t, "dump-log", "/etc/hostname")
	if err == nil || !strings.Contains(err.Error(), "is not a segment: give a .log file") {
		t.Fatalf("dump-log of a non-segment: %v", err)
	}
}

// A record above what the client sends names the flag that raises it.
func TestProduceRecordTooLargeNamesTheFlag(t *testing.T) {
	f := startFakeTxnBroker(t)
	input := strings.Repeat("x", 3000) + "\n"
	_, _, err := runWithStdin(t, input, "--brokers", f.addr, "produce", "m", "--max-request-bytes", "2048")
	if err == nil || !strings.Contains(err.Error(), "raise --max-request-bytes") {
		t.Fatalf("produce of a 3000-byte record with --max-request-bytes 2048: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records != 0 {
		t.Errorf("%d records reached the broker", f.records)
	}
}
