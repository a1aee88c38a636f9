package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Offline replicas (decision 42). A hosted replica whose log hits a file
// error (storage.Failure), or whose log cannot be opened, is offline on
// this broker until the process restarts:
//
//   - every request for it (produce, fetch of consumers and followers,
//     list offsets, OffsetForLeaderEpoch, the coordinators' appends and
//     reads) answers KAFKA_STORAGE_ERROR naming the directory, the file
//     and the OS error (ReplicaManager.Replica);
//   - it stops serving as leader (its tracker is dropped: acks=all
//     waiters and leadership listeners hear it) and as follower (its
//     fetch stops), and the metadata no longer changes its role;
//   - retention, the cleaner and the ISR loop leave it alone;
//   - the broker's heartbeats report it (OfflineReplicas) and the
//     controller moves its leadership and ISR membership away.
//
// The failure is logged once, at error level, when it happens.

// ReplicaFailure is a replica offline on this broker.
type ReplicaFailure struct {
	TopicPartition
	TopicID string
	// Dir is the partition's log directory.
	Dir string
	// Failure is what failed: the operation, file and OS error ("open"
	// with the directory when the log could not be opened).
	Failure *storage.Failure
	// Since is when this broker noticed.
	Since time.Time
}

// Reason is the failure for people: "partition t-0 at <dir>: write
// <file>: input/output error".
func (f ReplicaFailure) Reason() string {
	return fmt.Sprintf("partition %s at %s: %v", f.TopicPartition, f.Dir, f.Failure)
}

// storageError is the KAFKA_STORAGE_ERROR requests for the replica get.
func (f ReplicaFailure) storageError(node int32) error {
	return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "partition %s at %s is offline on node %d after a disk error: %w", f.TopicPartition, f.Dir, node, f.Failure)
}

// Offline reports whether the replica's log failed (decision 42).
func (p *Replica) Offline() bool { return p.log.Failure() != nil }

// OfflineReplicas returns the replicas offline on this broker, by topic
// and partition.
func (m *ReplicaManager) OfflineReplicas() []ReplicaFailure {
	m.failMu.Lock()
	out := make([]ReplicaFailure, 0, len(m.failed))
	for _, f := range m.failed {
		out = append(out, f)
	}
	m.failMu.Unlock()
	slices.SortFunc(out, func(a, b ReplicaFailure) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// OfflineReplicaReports is OfflineReplicas as the broker's heartbeat
// reports them to the controller.
func (m *ReplicaManager) OfflineReplicaReports() []controller.OfflineReplica {
	fs := m.OfflineReplicas()
	if len(fs) == 0 {
		return nil
	}
	out := make([]controller.OfflineReplica, 0, len(fs))
	for _, f := range fs {
		out = append(out, controller.OfflineReplica{Topic: f.Topic, TopicID: f.TopicID, Partition: f.Partition, Path: f.Dir, Error: f.Failure.Error()})
	}
	return out
}

// replicaFailed records that the log of tp (topic id, directory dir)
// failed with f, logs it (once per replica) and wakes offlineLoop. It is
// the log's OnFailure hook: it may run under the log's locks and a
// replica's roleMu, so it takes only failMu (a leaf) and does not block.
func (m *ReplicaManager) replicaFailed(tp TopicPartition, topicID, dir string, f *storage.Failure) {
	m.failMu.Lock()
	_, seen := m.failed[tp]
	if !seen {
		m.failed[tp] = ReplicaFailure{TopicPartition: tp, TopicID: topicID, Dir: dir, Failure: f, Since: time.Now()}
	}
	m.failMu.Unlock()
	if seen {
		return
	}
	m.log.Error("partition log failed on disk: the replica is offline on this broker until it restarts with a healthy directory",
		"topic", tp.Topic, "partition", tp.Partition, "path", dir, "op", string(f.Op), "file", f.Path, "err", f.Err)
	select {
	case m.failedCh <- struct{}{}:
	default:
	}
}

// failure returns tp's failure, if it is offline here.
func (m *ReplicaManager) failure(tp TopicPartition) (ReplicaFailure, bool) {
	m.failMu.Lock()
	defer m.failMu.Unlock()
	f, ok := m.failed[tp]
	return f, ok
}

// forgetFailure drops tp's failure of topic id topicID: the partition is
// no longer hosted here (deleted, moved, or re-created under a new id).
func (m *ReplicaManager) forgetFailure(tp TopicPartition, topicID string) {
	m.failMu.Lock()
	defer m.failMu.Unlock()
	if f, ok := m.failed[tp]; ok && f.TopicID == topicID {
		delete(m.failed, tp)
	}
}

// offlineLoop takes failed replicas out of service as soon as they fail
// (Apply also does, at the next image).
func (m *ReplicaManager) offlineLoop() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.failedCh:
		}
		m.applyMu.Lock()
		for _, p := range m.allReplicas() {
			if p.Offline() {
				m.stopServingLocked(p)
			}
		}
		m.applyMu.Unlock()
	}
}

// stopServingLocked ends p's leadership and following for good: it is
// offline. Idempotent. Caller holds applyMu.
func (m *ReplicaManager) stopServingLocked(p *Replica) {
	if m.fetchers != nil {
		m.fetchers.unfollow(p.TopicPartition)
	}
	p.roleMu.Lock()
	p.dropTrackerLocked()
	p.following, p.followEpoch = controller.NoLeader, -1
	p.roleMu.Unlock()
}

// healthyReplicas are the hosted replicas that are not offline: the ones
// background work (retention, cleaner, ISR upkeep) looks after.
func (m *ReplicaManager) healthyReplicas() []*Replica {
	all := m.allReplicas()
	out := all[:0]
	for _, p := range all {
		if !p.Offline() {
			out = append(out, p)
		}
	}
	return out
}
