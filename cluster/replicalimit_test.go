package cluster

import (
	"testing"

	"github.com/sluice-io/sluice/storage"
)

// A broker registers the replica limit the controller enforces (issue
// 29): by default half its open-files limit (storage.DefaultMaxReplicas),
// the configured one when set, none when negative; always with the
// open-files limit, which the controller's refusal names.
func TestBrokerRegistersReplicaLimit(t *testing.T) {
	nofile := storage.OpenFilesLimit()
	for _, tc := range []struct {
		cfg  int32
		want int32
	}{
		{0, int32(storage.DefaultMaxReplicas(nofile))},
		{1234, 1234},
		{-1, 0},
	} {
		got, n := BrokerConfig{MaxReplicas: tc.cfg}.replicaLimit()
		if got != tc.want || n != int64(nofile) {
			t.Errorf("MaxReplicas %d: registers %d (open files %d), want %d (%d)", tc.cfg, got, n, tc.want, nofile)
		}
	}
	if nofile == 20000 && storage.DefaultMaxReplicas(nofile) != 10000 {
		t.Errorf("default limit at 20,000 open files: %d, want 10,000", storage.DefaultMaxReplicas(nofile))
	}
}
