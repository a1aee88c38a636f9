package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// SnapshotVersion is the version of the snapshot format written by
// EncodeSnapshot.
const SnapshotVersion = 1

// maxDeltas is how many accepted records the FSM keeps for subscribers; a
// subscriber further behind than this gets a full image instead.
const maxDeltas = 4096

// snapshotFile is the on-disk snapshot: the image as JSON inside a small
// versioned wrapper, e.g. {"version":1,"image":{"offset":12,...}}.
type snapshotFile struct {
	Version int    `json:"version"`
	Image   *Image `json:"image"`
}

// EncodeSnapshot encodes im as a snapshot. encoding/json sorts map keys, so
// equal images encode to equal bytes.
func EncodeSnapshot(im *Image) ([]byte, error) {
	return json.Marshal(snapshotFile{Version: SnapshotVersion, Image: im})
}

// DecodeSnapshot decodes a snapshot written by EncodeSnapshot. The result is
// normalized like Clone (no nil maps), so DecodeSnapshot(EncodeSnapshot(im))
// is reflect.DeepEqual to im.Clone().
func DecodeSnapshot(data []byte) (*Image, error) {
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("controller: decode snapshot: %w", err)
	}
	if f.Version != SnapshotVersion {
		return nil, fmt.Errorf("controller: unsupported snapshot version %d", f.Version)
	}
	if f.Image == nil {
		return nil, fmt.Errorf("controller: snapshot has no image")
	}
	return f.Image.Clone(), nil
}

// Delta is one accepted record and the Raft index it was applied at.
// Record values are never mutated after they are stored and one Delta may
// be handed to several subscribers, so readers must not modify a Record's
// slices or maps.
type Delta struct {
	Offset uint64
	Record Record
}

// applyResponse is what FSM.Apply returns to raft.Apply's future.
type applyResponse struct {
	Result Result
	Err    error
}

// FSM adapts Apply to raft.FSM. It owns the current Image.
//
// hashicorp/raft calls Apply, Snapshot and Restore from one goroutine, never
// concurrently with each other; FSMSnapshot.Persist runs concurrently with
// later Applies, which is why Snapshot hands Persist its own copy. The read
// methods (Image, WaitForOffset, Subscribe) are safe from any goroutine.
type FSM struct {
	mu sync.Mutex // guards the following
	// image is the current state; never handed out without Clone.
	image *Image
	// deltas are the last accepted records, oldest first; together they
	// cover every accepted record with Offset > deltaFloor.
	deltas     []Delta
	deltaFloor uint64
	// changed is closed (and replaced) whenever image.Offset moves, waking
	// every waiter at once.
	changed chan struct{}
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM holding NewImage().
func NewFSM() *FSM {
	return &FSM{image: NewImage(), changed: make(chan struct{})}
}

// Apply implements raft.FSM. Only LogCommand entries carry records. A
// record that fails to decode or is rejected by the rules still advances
// the image offset (every voter rejects it identically); the rejection is
// returned to the proposer as the future's response.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	rec, err := DecodeRecord(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	var res Result
	if err == nil {
		res, err = Apply(f.image, rec, l.Index)
	}
	if err == nil {
		f.deltas = append(f.deltas, Delta{Offset: l.Index, Record: rec})
		if len(f.deltas) > maxDeltas {
			n := len(f.deltas) - maxDeltas
			f.deltaFloor = f.deltas[n-1].Offset
			f.deltas = append(f.deltas[:0:0], f.deltas[n:]...)
		}
	}
	if l.Index > f.image.Offset {
		f.image.Offset = l.Index
	}
	f.notifyLocked()
	return &applyResponse{Result: res, Err: err}
}

func (f *FSM) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Snapshot implements raft.FSM: it copies the image; Persist encodes it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{image: f.image.Clone()}, nil
}

// Restore implements raft.FSM: the snapshot replaces the image entirely.
// Subscribers positioned before the snapshot receive a full image next.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("controller: read snapshot: %w", err)
	}
	im, err := DecodeSnapshot(data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.image = im
	f.deltas = nil
	f.deltaFloor = im.Offset
	f.notifyLocked()
	return nil
}

// Image returns a deep copy of the current image.
func (f *FSM) Image() *Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.image.Clone()
}

// view calls fn with the current image under the lock; fn must not retain
// im or anything in it, and must not call back into f.
func (f *FSM) view(fn func(im *Image)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.image)
}

// WaitForOffset blocks until the image offset is at least offset or ctx is
// done (returning ctx's error).
func (f *FSM) WaitForOffset(ctx context.Context, offset uint64) error {
	for {
		f.mu.Lock()
		cur, ch := f.image.Offset, f.changed
		f.mu.Unlock()
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

// Update is what a Subscription delivers: either the deltas after the
// subscriber's previous position, or (when it fell too far behind, or a
// snapshot was restored) a full Image to start over from. Offset is the
// image offset the subscriber is at after applying the update; it can be
// greater than the last delta's offset when later records were rejected.
type Update struct {
	Offset   uint64
	Snapshot *Image
	Deltas   []Delta
}

// Subscription follows the metadata log from a position: the broker-side
// metadata stream (DESIGN §6, "a snapshot plus ordered deltas"). It is not
// safe for concurrent use; one goroutine calls Next.
type Subscription struct {
	fsm    *FSM
	offset uint64
}

// Subscribe returns a Subscription positioned after offset: its first
// Next returns what was applied after offset (0 = everything, which is a
// full image once the log has been compacted).
func (f *FSM) Subscribe(offset uint64) *Subscription {
	return &Subscription{fsm: f, offset: offset}
}

// Offset is the subscriber's current position.
func (s *Subscription) Offset() uint64 { return s.offset }

// Next blocks until something was applied after the subscription's
// position or ctx is done, then returns it and advances the position.
// The returned Image and Deltas are the caller's.
func (s *Subscription) Next(ctx context.Context) (Update, error) {
	f := s.fsm
	for {
		f.mu.Lock()
		if f.image.Offset > s.offset {
			u := Update{Offset: f.image.Offset}
			if s.offset < f.deltaFloor {
				u.Snapshot = f.image.Clone()
			} else {
				for _, d := range f.deltas {
					if d.Offset > s.offset {
						u.Deltas = append(u.Deltas, d)
					}
				}
			}
			f.mu.Unlock()
			s.offset = u.Offset
			return u, nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Update{}, ctx.Err()
		}
	}
}

// fsmSnapshot is a point-in-time image owned by the snapshot.
type fsmSnapshot struct{ image *Image }

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := EncodeSnapshot(s.image)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("controller: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

// responseError turns an applyResponse into Go values.
func responseError(resp any) (Result, error) {
	r, ok := resp.(*applyResponse)
	if !ok {
		return Result{}, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "unexpected raft response %T", resp)
	}
	return r.Result, r.Err
}
