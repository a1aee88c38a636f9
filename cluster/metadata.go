package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-io/sluice/cluster/controller"
)

// MetadataCache is a broker's copy of the controller's metadata image,
// built from the metadata stream: a snapshot, then deltas applied with the
// controller's own pure Apply, so it equals the controller's image at the
// same offset. Safe for concurrent use; one goroutine (the metadata
// stream) writes it.
type MetadataCache struct {
	mu sync.RWMutex // guards the following
	im *controller.Image
	// applied is the offset the broker has fully acted on (the replica
	// manager follows im); it trails im.Offset while an update is being
	// applied. Waiters and heartbeats use it.
	applied uint64
	// controllerLeader is the active controller as last reported (0 =
	// unknown).
	controllerLeader int32
	// changed is closed and replaced whenever the image moves.
	changed chan struct{}
}

// NewMetadataCache returns an empty cache at offset 0.
func NewMetadataCache() *MetadataCache {
	return &MetadataCache{im: controller.NewImage(), changed: make(chan struct{})}
}

// Update applies one metadata-stream update: snapshot (replacing the
// image) or deltas, then moves the image offset to offset; MarkApplied
// then publishes it to waiters. A delta that does not
// apply means the cache diverged from the controller: the cache is left
// unchanged and the error tells the caller to resubscribe from 0.
func (c *MetadataCache) Update(offset uint64, snapshot *controller.Image, deltas []controller.Delta) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.im
	if snapshot != nil {
		next = snapshot.Clone()
	} else if len(deltas) > 0 {
		// Copy-on-write (controller.ImageEditor): the new image shares
		// every topic, partition and broker the deltas leave alone with
		// the published one, so an update costs what it changes, not the
		// size of the cluster (issue 31), and the replica manager skips
		// what it finds at the same pointer.
		ed := controller.EditImage(c.im)
		for _, d := range deltas {
			if d.Offset <= ed.Image().Offset {
				continue // already applied (a resubscription overlapped)
			}
			if _, err := ed.Apply(d.Record, d.Offset); err != nil {
				return fmt.Errorf("metadata delta at offset %d (%s) does not apply: %w", d.Offset, d.Record.Type(), err)
			}
		}
		next = ed.Image()
	}
	if offset < next.Offset {
		return fmt.Errorf("metadata update to offset %d is behind the image at %d", offset, next.Offset)
	}
	if next == c.im && offset == c.im.Offset {
		return nil // keepalive
	}
	if next == c.im {
		next = controller.EditImage(c.im).Image()
	}
	next.Offset = offset
	c.im = next
	return nil
}

// MarkApplied records that the broker has acted on the image through
// offset, waking WaitForOffset callers.
func (c *MetadataCache) MarkApplied(offset uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if offset == c.applied {
		return
	}
	c.applied = offset
	close(c.changed)
	c.changed = make(chan struct{})
}

// SetControllerLeader records the active controller's id (0 = unknown).
func (c *MetadataCache) SetControllerLeader(id int32) {
	c.mu.Lock()
	c.controllerLeader = id
	c.mu.Unlock()
}

// ControllerLeader is the last known active controller (0 = unknown).
func (c *MetadataCache) ControllerLeader() int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.controllerLeader
}

// Offset is the metadata offset the broker has applied (MarkApplied).
func (c *MetadataCache) Offset() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.applied
}

// Image returns the current image. It is shared and immutable: the cache
// never modifies an image after publishing it, so callers may read it
// without locks but must not modify it.
func (c *MetadataCache) Image() *controller.Image {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.im
}

// Changed returns a channel closed at the next MarkApplied.
func (c *MetadataCache) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// WaitForOffset blocks until the cache has applied offset or ctx is done.
func (c *MetadataCache) WaitForOffset(ctx context.Context, offset uint64) error {
	for {
		c.mu.RLock()
		cur, ch := c.applied, c.changed
		c.mu.RUnlock()
		if cur >= offset {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// LeaderHint is where a partition's leader is, for NOT_LEADER_OR_FOLLOWER
// answers.
type LeaderHint struct {
	LeaderID    int32 // controller.NoLeader when offline
	LeaderEpoch int32
	Address     string // "" when unknown or offline
}

// Leader looks up topic/partition: its leader, leader epoch and the
// leader's address. ok is false when the partition does not exist.
func (c *MetadataCache) Leader(topic string, partition int32) (LeaderHint, bool) {
	im := c.Image()
	p := im.Partition(topic, partition)
	if p == nil {
		return LeaderHint{}, false
	}
	h := LeaderHint{LeaderID: p.Leader, LeaderEpoch: p.LeaderEpoch}
	if b := im.Brokers[p.Leader]; b != nil {
		h.Address = b.Address
	}
	return h, true
}
