package replication_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/cluster/replication"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestTrackerLifecycleTrace drives one leader epoch through catch-up, a
// lagging follower's removal, its return and re-admission, and compares
// the Tracker's state after every event with testdata/tracker_lifecycle.golden
// (go test -run TestTrackerLifecycleTrace -update rewrites it).
func TestTrackerLifecycleTrace(t *testing.T) {
	tr, err := replication.NewTracker(base(nil))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	state := func(ms int) string {
		pending, _ := tr.PendingISR()
		return fmt.Sprintf("HW=%d LEO=%d ISR=%v pending=%v epoch=%d shrink=%v enough=%v",
			tr.HW(), tr.LeaderLEO(), tr.ISR(), pending, tr.PartitionEpoch(), tr.ShrinkCandidates(at(ms)), tr.EnoughReplicas())
	}
	log := func(ms int, event, result string) {
		fmt.Fprintf(&b, "t=%5dms %-22s %-32s | %s\n", ms, event, result, state(ms))
	}
	fetch := func(ms int, id int32, off int64) {
		u, err := tr.FollowerFetched(id, off, at(ms))
		if err != nil {
			t.Fatal(err)
		}
		log(ms, fmt.Sprintf("fetch %d@%d", id, off), fmt.Sprintf("hwChanged=%v expand=%v", u.HWChanged, u.ExpandISR))
	}
	appendTo := func(ms int, leo int64) {
		log(ms, fmt.Sprintf("append LEO=%d", leo), fmt.Sprintf("hwChanged=%v", tr.LeaderAppended(leo, at(ms))))
	}
	beginChange := func(ms int, isr ...int32) {
		req, err := tr.BeginISRChange(isr)
		if err != nil {
			t.Fatal(err)
		}
		log(ms, fmt.Sprintf("begin %v", isr), fmt.Sprintf("AlterPartition epoch=%d", req.PartitionEpoch))
	}
	commitChange := func(ms int, epoch int32, isr ...int32) {
		changed, err := tr.ISRChangeCommitted(isr, epoch, at(ms))
		if err != nil {
			t.Fatal(err)
		}
		log(ms, fmt.Sprintf("commit %v@%d", isr, epoch), fmt.Sprintf("hwChanged=%v", changed))
	}

	log(0, "elected", "")
	fetch(50, 2, 10)
	fetch(60, 3, 10)
	appendTo(100, 15)
	fetch(150, 2, 15)
	fetch(160, 3, 15)
	appendTo(200, 20)
	fetch(250, 2, 20) // 3 goes quiet, caught up last at 160ms
	log(1160, "check", "")
	log(1161, "check", "")
	beginChange(1161, 1, 2)
	appendTo(1180, 22) // held by 3: the shrink is not committed yet
	commitChange(1200, 11, 1, 2)
	// 2 has not fetched since 250ms. Its LEO equalled the leader's, so it
	// was in sync; once the leader's LEO moves it is out of sync at once,
	// until its next fetch.
	appendTo(1300, 30)
	fetch(1310, 2, 30)
	fetch(1400, 3, 20) // back, but below the HW
	fetch(1500, 3, 30)
	beginChange(1500, 1, 2, 3)
	appendTo(1550, 35)
	fetch(1560, 2, 35) // 3, being added, holds the HW
	fetch(1600, 3, 35)
	commitChange(1700, 12, 1, 2, 3)

	path := filepath.Join("testdata", "tracker_lifecycle.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("trace differs from %s (run with -update after checking):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
