package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/fdlimit"
	"github.com/sluice-io/sluice/storage"
)

// Out of file descriptors (issue 29; storage/resource.go). A partition log
// operation that fails with EMFILE or ENFILE leaves the replica online:
// the request that hit it fails with a retriable error and is retried by
// its sender; the periodic high-watermark checkpoint and a follower's
// append are retried after resourceRetryBackoff; a log that could not be
// opened is opened again by reopenLoop, with a backoff from
// resourceRetryBackoff up to reopenBackoffMax, until it opens. Each such
// error is counted (ResourceErrors, the broker's
// sluice_storage_fd_exhausted_total) and logged, at most once per
// resourceLogEvery, with the process's file-descriptor limits.

const (
	// resourceLogEvery bounds the rate of the out-of-descriptors log line.
	resourceLogEvery = 10 * time.Second
	// resourceRetryBackoff is how long a follower waits before fetching
	// again after a resource error, and reopenLoop's first wait.
	resourceRetryBackoff = time.Second
	// reopenBackoffMax caps reopenLoop's wait.
	reopenBackoffMax = 30 * time.Second
)

// resourceErrors is the ReplicaManager's account of resource errors.
type resourceErrors struct {
	total atomic.Uint64

	mu sync.Mutex // guards the following; a leaf (taken under a log's locks)
	// lastLog is when the last line was logged; suppressed counts the
	// errors since then that were not.
	lastLog    time.Time
	suppressed uint64
}

// reopenState is what reopenLoop retries: the image of the last Apply
// while one of its logs could not be opened for want of descriptors.
type reopenState struct {
	// image is guarded by applyMu: Apply sets it (nil once every log of
	// the image opened), reopenLoop re-applies it under the same lock, so
	// a retry never applies an image older than the newest one.
	image *controller.Image
	// wake (capacity 1) tells reopenLoop that image needs a retry.
	wake chan struct{}
}

// ResourceErrors is the number of partition log operations (and log
// opens) that failed because the process or the system was out of file
// descriptors since the manager started. Safe for concurrent use.
func (m *ReplicaManager) ResourceErrors() uint64 { return m.resources.total.Load() }

// resourceError counts a resource error of tp's log (the log's
// OnResourceError hook, or a failed open; the zero tp: the data
// directory's high-watermark checkpoint) and logs it unless a line was
// logged less than resourceLogEvery ago. It may run under the log's locks
// and a replica's roleMu: it takes only resources.mu (a leaf) and does
// not block.
func (m *ReplicaManager) resourceError(tp TopicPartition, f *storage.Failure) {
	total := m.resources.total.Add(1)
	now := time.Now()
	r := &m.resources
	r.mu.Lock()
	if !r.lastLog.IsZero() && now.Sub(r.lastLog) < resourceLogEvery {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := r.suppressed
	r.lastLog, r.suppressed = now, 0
	r.mu.Unlock()
	args := []any{"op", string(f.Op), "file", f.Path, "err", f.Err, "not_logged_since_last", suppressed, "total", total}
	if tp.Topic != "" { // the zero value: a file of every partition (the high-watermark checkpoint)
		args = append([]any{tp.LogAttr()}, args...)
	}
	if soft, hard, err := fdlimit.Get(); err == nil {
		args = append(args, "open_files_limit", soft, "open_files_hard_limit", hard)
	}
	m.log.Warn("out of file descriptors: a partition log operation failed and is retried; the partition stays online "+
		"(raise the open-files limit, or lower the listeners' connection limits)", args...)
}

// noteReopen records, at the end of an Apply of im (applyMu held),
// whether a log of im could not be opened for want of descriptors, and
// wakes reopenLoop if so.
func (m *ReplicaManager) noteReopen(im *controller.Image, retry bool) {
	if !retry {
		m.reopen.image = nil
		return
	}
	m.reopen.image = im
	select {
	case m.reopen.wake <- struct{}{}:
	default:
	}
}

// reopenLoop re-applies the image whose logs could not all be opened for
// want of file descriptors, after a backoff that doubles while the opens
// keep failing, until they succeed, a newer Apply opens them, or the
// manager closes. It passes caughtUp false: a retry deletes no directory.
func (m *ReplicaManager) reopenLoop() {
	backoff := resourceRetryBackoff
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.reopen.wake:
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		m.applyMu.Lock()
		im := m.reopen.image
		if im != nil && m.ctx.Err() == nil {
			if err := m.applyLocked(im, time.Now(), false); err != nil && m.reopen.image == nil {
				m.log.Error("applying metadata to the partition logs", "err", err)
			}
		}
		again := m.reopen.image != nil
		m.applyMu.Unlock()
		if again {
			backoff = min(2*backoff, reopenBackoffMax) // applyLocked woke us again
		} else {
			backoff = resourceRetryBackoff
		}
	}
}
