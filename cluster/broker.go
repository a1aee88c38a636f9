package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// DefaultHeartbeatInterval is broker.heartbeat.interval.ms; it must be well
// below the controller's session timeout.
const DefaultHeartbeatInterval = 250 * time.Millisecond

// BrokerConfig configures a BrokerLifecycle.
type BrokerConfig struct {
	NodeID  int32
	Address string // advertised address of the client listener
	// InternalAddress is the advertised address of the internal listener,
	// where other nodes call this broker's inter-node services (decision
	// 41); registered with Address.
	InternalAddress string
	// KafkaAddress is the advertised address of the Kafka-protocol
	// listener (issue 34), registered with Address; empty: none.
	KafkaAddress string
	Rack         string
	// HeartbeatInterval; 0 means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// SessionTimeout is the controller's broker session timeout
	// (controller.Config.SessionTimeout); 0 means
	// controller.DefaultSessionTimeout. A controlled shutdown stops waiting
	// once no heartbeat has been answered for that long: an active
	// controller has then fenced this broker itself, and without one
	// nothing can move the leaderships.
	SessionTimeout time.Duration
	Controllers    *ControllerClient
	Metadata       *MetadataCache
	// MetadataStreamIdle overrides MetadataStreamIdleTimeout (tests); 0
	// means the default.
	MetadataStreamIdle time.Duration
	// OnImage is called from the metadata goroutine after every applied
	// update (the replica manager follows the image there). May be nil.
	OnImage func(im *controller.Image)
	// OfflineReplicas, when set, lists the replicas offline on this broker
	// after a disk error (ReplicaManager.OfflineReplicaReports); every
	// heartbeat reports them (decision 42). Called from the heartbeat
	// goroutine.
	OfflineReplicas func() []controller.OfflineReplica
	// MaxReplicas is the most partition replicas this broker accepts,
	// registered with the controller, which refuses a topic creation or
	// reassignment that would place more here (issue 29): 0 derives it
	// from the open-files limit (storage.DefaultMaxReplicas), negative
	// registers no limit.
	MaxReplicas int32
	Logger      *slog.Logger
}

// replicaLimit is the replica limit the broker registers and the
// open-files limit it is derived from (controller.CheckReplicaLimits).
func (c BrokerConfig) replicaLimit() (maxReplicas int32, nofile int64) {
	n := storage.OpenFilesLimit()
	switch {
	case c.MaxReplicas > 0:
		return c.MaxReplicas, int64(n)
	case c.MaxReplicas < 0:
		return 0, int64(n)
	}
	return int32(min(storage.DefaultMaxReplicas(n), 1<<30)), int64(n)
}

// BrokerLifecycle runs a broker's side of the cluster protocol (DESIGN §6):
// it registers with the active controller (a new broker epoch per process
// start), follows the metadata stream into the MetadataCache, heartbeats,
// asks to be unfenced once it has caught up with its registration, and on
// shutdown asks the controller to move its leaderships away first.
type BrokerLifecycle struct {
	cfg BrokerConfig
	log *slog.Logger

	mu            sync.Mutex // guards the following
	incarnation   string
	epoch         int64
	registeredAt  uint64 // metadata offset of the registration
	readyAt       uint64 // metadata offset at which the controller unfenced us
	fenced        bool
	wantShutdown  bool
	shutdownReady chan struct{} // closed when the controller says so
	// lastAnswer is when a heartbeat was last answered (zero before the
	// first); hbFailed is closed (and replaced) at every failed one, for
	// ControlledShutdown.
	lastAnswer time.Time
	hbFailed   chan struct{}
	registered chan struct{} // closed at the first registration
	// hbSent counts heartbeat requests sent; hbAnswered is the count at
	// the last one answered, hbOffset that answer's metadata offset, and
	// hbChanged is closed (and replaced) at every answer (MetadataBarrier).
	hbSent, hbAnswered uint64
	hbOffset           uint64
	hbChanged          chan struct{}

	// silentVoter is the voter whose metadata stream just went silent
	// (MetadataStreamIdleTimeout), tried last by the next subscription
	// only; 0 for none. Owned by the metadata goroutine.
	silentVoter int32

	// ctx ends at Stop; goroutines are the metadata and heartbeat loops.
	ctx        context.Context
	cancel     context.CancelFunc
	goroutines goroutine.Group
}

// NewBrokerLifecycle returns an unstarted lifecycle.
func NewBrokerLifecycle(cfg BrokerConfig) *BrokerLifecycle {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = controller.DefaultSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &BrokerLifecycle{cfg: cfg, log: cfg.Logger, fenced: true, ctx: ctx, cancel: cancel,
		incarnation: newIncarnation(), shutdownReady: make(chan struct{}), registered: make(chan struct{}),
		hbFailed: make(chan struct{})}
}

func newIncarnation() string {
	var b [16]byte
	_, _ = io.ReadFull(rand.Reader, b[:])
	return hex.EncodeToString(b[:])
}

func (b *BrokerLifecycle) idleTimeout() time.Duration {
	if b.cfg.MetadataStreamIdle > 0 {
		return b.cfg.MetadataStreamIdle
	}
	return MetadataStreamIdleTimeout
}

// Start begins the metadata stream and the register/heartbeat loop.
func (b *BrokerLifecycle) Start() {
	b.goroutines.Go(b.metadataLoop)
	b.goroutines.Go(b.heartbeatLoop)
}

// Epoch is the current broker epoch (0 before registration).
func (b *BrokerLifecycle) Epoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

// Fenced reports whether the controller last said this broker is fenced.
func (b *BrokerLifecycle) Fenced() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fenced
}

// CaughtUp reports whether an image at offset includes this broker's
// current registration, and so every record before it.
func (b *BrokerLifecycle) CaughtUp(offset uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch > 0 && offset >= b.registeredAt
}

// Ready reports whether the broker is registered, unfenced and has applied
// the metadata through its registration.
func (b *BrokerLifecycle) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch > 0 && !b.fenced && b.cfg.Metadata.Offset() >= max(b.registeredAt, b.readyAt)
}

// ControlledShutdown asks the controller to fence this broker and move its
// leaderships away, and waits until it confirms or ctx is done. Heartbeats
// continue afterwards (without asking to be unfenced) until Stop.
//
// It also stops waiting, with ErrControllerUnreachable, once no heartbeat
// has been answered for the session timeout since the shutdown was asked
// (or since the last answer, if later): an active controller has then
// fenced this broker on its own and moved what it could, and without one
// (the last node of a cluster, its quorum gone) nothing can move. Waiting
// out ctx then only delays the stop.
func (b *BrokerLifecycle) ControlledShutdown(ctx context.Context) error {
	b.mu.Lock()
	b.wantShutdown = true
	ready := b.shutdownReady
	asked := time.Now()
	b.mu.Unlock()
	for {
		b.mu.Lock()
		failed := b.hbFailed
		since := asked
		if b.lastAnswer.After(since) {
			since = b.lastAnswer
		}
		b.mu.Unlock()
		silent := time.Since(since)
		if silent >= b.cfg.SessionTimeout {
			return fmt.Errorf("%w: no heartbeat answered for %v (session timeout %v)", ErrControllerUnreachable, silent.Round(time.Millisecond), b.cfg.SessionTimeout)
		}
		// Look again when a heartbeat fails or the silence would reach the
		// session timeout (a heartbeat to no controller may take seconds
		// to fail).
		t := time.NewTimer(b.cfg.SessionTimeout - silent)
		select {
		case <-ready:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "controlled shutdown not confirmed: %w", ctx.Err())
		case <-b.ctx.Done():
			t.Stop()
			return errors.New("broker lifecycle stopped")
		case <-failed:
			t.Stop()
		case <-t.C:
		}
	}
}

// ErrControllerUnreachable is ControlledShutdown's error when no
// controller answered heartbeats for the session timeout.
var ErrControllerUnreachable = errors.New("controlled shutdown: no controller answers")

// Stop ends every goroutine.
func (b *BrokerLifecycle) Stop() {
	b.cancel()
	b.goroutines.Wait()
}

// heartbeatLoop registers, then heartbeats every interval; a
// STALE_BROKER_EPOCH answer (the controller lost or replaced the
// registration) makes it register again with a new incarnation.
func (b *BrokerLifecycle) heartbeatLoop() {
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if b.Epoch() == 0 {
			b.register()
		} else {
			b.heartbeat()
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *BrokerLifecycle) register() {
	b.mu.Lock()
	maxReplicas, nofile := b.cfg.replicaLimit()
	req := &internalv1.RegisterBrokerRequest{BrokerId: b.cfg.NodeID, Address: b.cfg.Address, InternalAddress: b.cfg.InternalAddress,
		KafkaAddress: b.cfg.KafkaAddress, Rack: b.cfg.Rack, IncarnationId: b.incarnation, MaxReplicas: maxReplicas, OpenFilesLimit: nofile}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	var resp *internalv1.RegisterBrokerResponse
	err := b.cfg.Controllers.Call(ctx, 5*time.Second, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		resp, err = cl.RegisterBroker(ctx, req)
		return err
	})
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn("broker registration failed; retrying", "err", err)
		}
		return
	}
	b.mu.Lock()
	b.epoch, b.registeredAt, b.fenced = resp.BrokerEpoch, resp.MetadataOffset, true
	select {
	case <-b.registered:
	default:
		close(b.registered)
	}
	b.mu.Unlock()
	b.log.Info("broker registered", "node_id", b.cfg.NodeID, "broker_epoch", resp.BrokerEpoch)
}

func (b *BrokerLifecycle) heartbeat() {
	b.mu.Lock()
	b.hbSent++
	seq := b.hbSent
	offset := b.cfg.Metadata.Offset()
	req := &internalv1.BrokerHeartbeatRequest{
		BrokerId: b.cfg.NodeID, BrokerEpoch: b.epoch, MetadataOffset: offset,
		WantUnfence:  !b.wantShutdown && offset >= b.registeredAt,
		WantShutdown: b.wantShutdown,
	}
	b.mu.Unlock()
	if b.cfg.OfflineReplicas != nil {
		for _, r := range b.cfg.OfflineReplicas() {
			req.OfflineReplicas = append(req.OfflineReplicas, &sluicev1.OfflineReplica{
				Topic: r.Topic, TopicId: r.TopicID, Partition: r.Partition, Path: r.Path, Error: r.Error})
		}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	var resp *internalv1.BrokerHeartbeatResponse
	err := b.cfg.Controllers.Call(ctx, 2*time.Second, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		resp, err = cl.BrokerHeartbeat(ctx, req)
		return err
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		close(b.hbFailed)
		b.hbFailed = make(chan struct{})
		if errs.Code(err) == sluicev1.ErrorCode_STALE_BROKER_EPOCH {
			b.log.Warn("broker epoch is stale; registering again", "broker_epoch", b.epoch, "err", err)
			b.epoch, b.fenced, b.incarnation = 0, true, newIncarnation()
		} else if b.ctx.Err() == nil {
			b.log.Warn("broker heartbeat failed", "err", err)
		}
		return
	}
	b.lastAnswer = time.Now()
	if seq > b.hbAnswered {
		b.hbAnswered, b.hbOffset = seq, resp.MetadataOffset
		if b.hbChanged != nil {
			close(b.hbChanged)
			b.hbChanged = nil
		}
	}
	if b.fenced != resp.Fenced {
		b.log.Info("broker fencing changed", "fenced", resp.Fenced, "broker_epoch", b.epoch)
		if !resp.Fenced {
			// Leaders re-elected on unfencing are in the image at this
			// offset; serving starts once the broker has applied it.
			b.readyAt = resp.MetadataOffset
		}
	}
	b.fenced = resp.Fenced
	if resp.ShutdownReady {
		select {
		case <-b.shutdownReady:
		default:
			close(b.shutdownReady)
		}
	}
}

// metadataLoop follows the metadata stream from the active controller
// into the cache, reconnecting (from the applied offset) whenever the
// stream ends or the serving voter is no longer the leader.
func (b *BrokerLifecycle) metadataLoop() {
	delay := 50 * time.Millisecond
	for b.ctx.Err() == nil {
		err := b.followOnce()
		if b.ctx.Err() != nil {
			return
		}
		if err != nil {
			b.log.Debug("metadata stream ended", "err", err)
		}
		if errors.Is(err, errResubscribe) || errors.Is(err, errStreamWorked) {
			// Moving to the active controller, or a stream that delivered
			// updates and then ended (the voter stopped): reconnect at once.
			delay = 10 * time.Millisecond
		}
		if e, _ := errs.FromStatus(err); errs.Code(e) == sluicev1.ErrorCode_NOT_CONTROLLER {
			// A new controller is being elected or is catching up (it
			// serves no stream before): poll briskly, it is soon ready.
			delay = min(delay, 200*time.Millisecond)
		}
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(delay):
		}
		if delay < time.Second {
			delay *= 2
		}
	}
}

// MetadataStreamIdleTimeout is how long a broker waits on its metadata
// stream without any message before it gives the stream up and
// subscribes again (to the voter it now believes leads). A serving voter
// sends a keepalive every second when idle (api.metadataKeepalive), so
// only a voter that is hung or stopped (SIGSTOP, a stalled machine) stays
// silent this long while its TCP connection stays open: without the
// timeout the broker would wait for it forever, heartbeating to the new
// controller but never seeing its metadata — found by the chaos harness,
// where a paused controller left every partition's leader and ISR frozen
// on every broker for the whole pause.
const MetadataStreamIdleTimeout = 4 * time.Second

// errResubscribe asks followOnce's caller to start over.
var errResubscribe = errors.New("resubscribe")

// errStreamWorked wraps the end of a stream that had delivered updates.
var errStreamWorked = errors.New("metadata stream ended after updates")

func (b *BrokerLifecycle) followOnce() error {
	cache := b.cfg.Metadata
	var stream internalv1.Controller_MetadataStreamClient
	var servingID int32
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	// Open the stream on the first voter that accepts it (leader first; a
	// voter whose stream just went silent last).
	var last error = errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "no controller is known yet")
	// Only for one subscription: the silence may have been this broker's
	// own (a stopped process sees every timer fire at once when it
	// resumes), and a voter that is in fact the leader must come first
	// again, or the broker would keep asking voters that answer
	// NOT_CONTROLLER.
	eps := b.cfg.Controllers.Endpoints()
	if i := slices.IndexFunc(eps, func(e ControllerEndpoint) bool { return e.ID == b.silentVoter }); i >= 0 {
		eps = append(append(eps[:i:i], eps[i+1:]...), eps[i])
	}
	b.silentVoter = 0
	for _, ep := range eps {
		cc, err := b.cfg.Controllers.pool.Get(ep.Address)
		if err != nil {
			last = err
			continue
		}
		s, err := internalv1.NewControllerClient(cc).MetadataStream(ctx, &internalv1.MetadataStreamRequest{BrokerId: b.cfg.NodeID, FromOffset: cache.Image().Offset})
		if err != nil {
			last = err
			continue
		}
		stream, servingID = s, ep.ID
		break
	}
	if stream == nil {
		return last
	}
	received := false
	var silent atomic.Bool
	idle := time.AfterFunc(b.idleTimeout(), func() {
		silent.Store(true)
		cancel()
	})
	defer idle.Stop()
	for {
		upd, err := stream.Recv()
		if err != nil {
			if silent.Load() {
				b.silentVoter = servingID
				b.log.Warn("metadata stream silent; subscribing again", "voter", servingID, "idle", b.idleTimeout())
				return fmt.Errorf("%w: voter %d sent nothing for %v", errResubscribe, servingID, b.idleTimeout())
			}
			if received {
				return fmt.Errorf("%w: %w", errStreamWorked, err)
			}
			return err
		}
		idle.Reset(b.idleTimeout())
		received = true
		if upd.ControllerLeader > 0 {
			b.cfg.Controllers.SetLeader(upd.ControllerLeader)
		}
		cache.SetControllerLeader(upd.ControllerLeader)
		var snap *controller.Image
		if len(upd.Snapshot) > 0 {
			if snap, err = controller.DecodeSnapshot(upd.Snapshot); err != nil {
				return err
			}
		}
		deltas := make([]controller.Delta, 0, len(upd.Deltas))
		for _, d := range upd.Deltas {
			rec, err := controller.DecodeRecord(d.Record)
			if err != nil {
				return err
			}
			deltas = append(deltas, controller.Delta{Offset: d.Offset, Record: rec})
		}
		before := cache.Image().Offset
		if snap != nil && upd.Offset < before {
			// Never go back to an older image: acting on it would undo
			// leadership changes (and truncate logs) that this broker has
			// already seen. Only a caught-up leader serves streams, so
			// this is a guard, not a path.
			b.log.Warn("metadata snapshot older than the image held; resubscribing", "snapshot_offset", upd.Offset, "image_offset", before, "voter", servingID)
			return errResubscribe
		}
		if err := cache.Update(upd.Offset, snap, deltas); err != nil {
			// Diverged: start over from a full image.
			b.log.Error("metadata cache diverged; reloading the full image", "err", err)
			_ = cache.Update(0, controller.NewImage(), nil)
			return errResubscribe
		}
		if im := cache.Image(); im.Offset != before || snap != nil {
			if b.cfg.OnImage != nil {
				b.cfg.OnImage(im)
			}
			cache.MarkApplied(im.Offset)
		}
		if upd.ControllerLeader > 0 && upd.ControllerLeader != servingID {
			return errResubscribe // move to the active controller
		}
	}
}

// WaitRegistered blocks until the broker has registered once (or ctx is
// done) and returns the current epoch.
func (b *BrokerLifecycle) WaitRegistered(ctx context.Context) (int64, error) {
	select {
	case <-b.registered:
	case <-ctx.Done():
		return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, "broker %d is not registered yet: %w", b.cfg.NodeID, ctx.Err())
	case <-b.ctx.Done():
		return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "broker %d is stopping", b.cfg.NodeID)
	}
	for {
		if e := b.Epoch(); e > 0 {
			return e, nil
		}
		// Re-registering after a stale epoch: wait a heartbeat.
		select {
		case <-ctx.Done():
			return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, "broker %d is re-registering: %w", b.cfg.NodeID, ctx.Err())
		case <-b.ctx.Done():
			return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "broker %d is stopping", b.cfg.NodeID)
		case <-time.After(b.cfg.HeartbeatInterval):
		}
	}
}

// AllocateProducerIDBlock asks the active controller for the next block of
// producer ids with this broker's epoch (coordinator.ProducerIDBlockAllocator).
func (b *BrokerLifecycle) AllocateProducerIDBlock(ctx context.Context) (start, end int64, err error) {
	epoch, err := b.WaitRegistered(ctx)
	if err != nil {
		return 0, 0, err
	}
	var resp *internalv1.AllocateProducerIdsResponse
	err = b.cfg.Controllers.Call(ctx, 5*time.Second, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		resp, err = cl.AllocateProducerIds(ctx, &internalv1.AllocateProducerIdsRequest{BrokerId: b.cfg.NodeID, BrokerEpoch: epoch})
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return resp.ProducerIdStart, resp.ProducerIdStart + int64(resp.ProducerIdLen), nil
}

// MetadataBarrier waits until this broker's metadata has caught up with
// the active controller as of now: it waits for a heartbeat sent after
// the call to be answered (heartbeats run every HeartbeatInterval) and
// then for the metadata cache to reach the offset in that answer. Use it
// before concluding from the local metadata that something does not exist
// (a partition in a transaction, created through another broker, may not
// have reached this broker yet). Errors: ctx ended, or the lifecycle
// stopped.
func (b *BrokerLifecycle) MetadataBarrier(ctx context.Context) error {
	b.mu.Lock()
	after := b.hbSent
	b.mu.Unlock()
	for {
		b.mu.Lock()
		if b.hbAnswered > after {
			offset := b.hbOffset
			b.mu.Unlock()
			return b.cfg.Metadata.WaitForOffset(ctx, offset)
		}
		if b.hbChanged == nil {
			b.hbChanged = make(chan struct{})
		}
		ch := b.hbChanged
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return errors.New("the broker is stopping")
		}
	}
}
