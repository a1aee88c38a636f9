package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// ReplicaManagerConfig configures a ReplicaManager.
type ReplicaManagerConfig struct {
	DataDir string
	NodeID  int32
	// RetentionCheckInterval is how often retention runs
	// (log.retention.check.interval.ms); 0 means 5 minutes.
	RetentionCheckInterval time.Duration
	// TransactionMaxTimeout is transaction.max.timeout.ms: a transaction
	// open on a partition longer is late (LateTransactions); 0 means
	// DefaultTransactionMaxTimeout.
	TransactionMaxTimeout time.Duration
	// LateTransactionCheckInterval is how often the partitions this node
	// leads are checked for late transactions, each logged; 0 means 1
	// minute.
	LateTransactionCheckInterval time.Duration
	// CleanerBackoff is how often the log cleaner checks the compacted
	// partitions (log.cleaner.backoff.ms, cleaner.go); 0 means
	// DefaultCleanerBackoff.
	CleanerBackoff time.Duration
	// PageCacheWindow is storage.Options.PageCacheWindow for every
	// partition log: how many of each segment's newest bytes are left in
	// the page cache (0: all, the kernel decides).
	PageCacheWindow int64
	// StorageFaults (testing only) injects file errors into every
	// partition log (storage.FaultInjector); nil in production.
	StorageFaults storage.FaultInjector
	Logger        *slog.Logger
}

// ReplicaManager owns the partition logs of this node. Which partitions it
// hosts, who leads them and their configs come from the metadata image
// (Apply); it hosts exactly the partitions whose replica set names this
// node. Safe for concurrent use.
type ReplicaManager struct {
	cfg ReplicaManagerConfig
	log *slog.Logger

	// applyMu serialises Apply (log creation and deletion) and every
	// leadership change (Apply, Close, listener registration); it also
	// guards fetchers and the two fields below. Lock order: applyMu before
	// a replica's roleMu before fetcherManager.mu before fetcher.mu, and
	// before mu (docs/locks.md).
	applyMu sync.Mutex
	// clusterID is the cluster this data dir belongs to ("" until the
	// first image that names one); guarded by applyMu.
	clusterID string
	// onDisk are partition directories found at start and not yet
	// claimed by the image, by directory name; guarded by applyMu and
	// onDiskMu (Apply opens new logs in parallel: claimOnDisk).
	onDiskMu sync.Mutex
	onDisk   map[string]string // dir name -> topic id ("" for legacy dirs)

	mu         sync.RWMutex // guards the following
	partitions map[TopicPartition]*Replica

	// repl and fetchers are set by StartReplication (nil without it);
	// fetchers is guarded by applyMu.
	repl        atomic.Pointer[ReplicationConfig]
	fetchers    *fetcherManager
	fetchPaused atomic.Bool
	// fetchRescanFound counts partitions a fetcher's rescan found changed
	// without a mark (fetcher.go): 0 unless a change is not marked.
	fetchRescanFound atomic.Int64

	// ctx ends at Close: it stops the loops and AlterPartition calls.
	ctx    context.Context
	cancel context.CancelFunc
	// goroutines are the retention and cleaner loops, the ISR loop and the
	// AlterPartition senders (the fetchers and the listener delivery
	// goroutine have their own groups).
	goroutines goroutine.Group
	// events delivers leadership changes to listeners (listener.go).
	events *leadershipEvents
	// txnVerifier is the TxnVerifier of AppendTxnTo (txn.go), nil until
	// SetTxnVerifier.
	txnVerifier atomic.Pointer[txnVerifierBox]
	// markerListeners hear committed markers (txn_offsets.go).
	markerListeners txnMarkerListeners
	// cleaner holds the log cleaner's totals (cleaner.go).
	cleaner cleanerTotals

	// failMu guards failed, the offline replicas (offline.go). It is a
	// leaf: taken from a log's failure hook, under the log's locks.
	failMu sync.Mutex
	failed map[TopicPartition]ReplicaFailure
	// failedCh wakes offlineLoop (capacity 1).
	failedCh chan struct{}

	// resources counts resource errors (EMFILE, ENFILE) and rate-limits
	// their log line; reopen is what reopenLoop retries (resource.go).
	resources resourceErrors
	reopen    reopenState

	// isrQueue is the replicas with ISR expansions queued (isr.go).
	isrQueue isrQueue

	// sessions are the followers' fetch sessions with this broker as
	// their leader (fetchsession.go).
	sessions *fetchSessions

	// hws is the high-watermark checkpoint of every log in logsDir (one
	// file; issue 31): the logs record their high watermarks in it and
	// isrLoop flushes it every hwCheckpointEvery when one changed.
	hws *storage.OffsetCheckpoint
	// rps is the recovery-point checkpoint of every log in logsDir, kept
	// the same way and flushed with hws (decision 57).
	rps *storage.OffsetCheckpoint

	// applied is the last image applyLocked went through (guarded by
	// applyMu): the next one skips what it shares with it.
	applied *controller.Image
}

// partitionMetaFile is written in every partition directory: the topic id
// the log belongs to, so a topic deleted and re-created under the same
// name while this broker was away is never confused with the old one.
const partitionMetaFile = "partition.metadata"

type partitionMeta struct {
	Version int    `json:"version"`
	TopicID string `json:"topic_id"`
}

// clusterFile records which cluster a data dir belongs to.
const clusterFile = "cluster.json"

type clusterMeta struct {
	Version   int    `json:"version"`
	ClusterID string `json:"cluster_id"`
	NodeID    int32  `json:"node_id"`
}

// NewReplicaManager scans dataDir/logs. Logs are opened by the first Apply
// that names them; directories no image claims are deleted once the image
// proves this data dir belongs to its cluster.
func NewReplicaManager(cfg ReplicaManagerConfig) (*ReplicaManager, error) {
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = 5 * time.Minute
	}
	if cfg.TransactionMaxTimeout <= 0 {
		cfg.TransactionMaxTimeout = DefaultTransactionMaxTimeout
	}
	if cfg.LateTransactionCheckInterval <= 0 {
		cfg.LateTransactionCheckInterval = time.Minute
	}
	if cfg.CleanerBackoff <= 0 {
		cfg.CleanerBackoff = DefaultCleanerBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &ReplicaManager{
		cfg:        cfg,
		log:        cfg.Logger,
		onDisk:     map[string]string{},
		partitions: map[TopicPartition]*Replica{},
		events:     newLeadershipEvents(),
		failed:     map[TopicPartition]ReplicaFailure{},
		sessions:   newFetchSessions(),
		failedCh:   make(chan struct{}, 1),
		reopen:     reopenState{wake: make(chan struct{}, 1)},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := os.MkdirAll(m.logsDir(), 0o755); err != nil {
		return nil, err
	}
	hws, err := storage.OpenHighWatermarks(m.logsDir())
	if err != nil {
		return nil, fmt.Errorf("high-watermark checkpoint: %w (move it aside to start every log from what it can prove committed)", err)
	}
	m.hws = hws
	rps, err := storage.OpenRecoveryPoints(m.logsDir())
	if err != nil {
		return nil, fmt.Errorf("recovery-point checkpoint: %w (move it aside to recover every log from its first segment)", err)
	}
	m.rps = rps
	if data, err := os.ReadFile(filepath.Join(cfg.DataDir, "meta", clusterFile)); err == nil {
		var cm clusterMeta
		if err := json.Unmarshal(data, &cm); err != nil {
			return nil, fmt.Errorf("%s is corrupt: %w", clusterFile, err)
		}
		if cm.NodeID != cfg.NodeID {
			return nil, fmt.Errorf("data dir %s belongs to node %d, not node %d", cfg.DataDir, cm.NodeID, cfg.NodeID)
		}
		m.clusterID = cm.ClusterID
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	entries, err := os.ReadDir(m.logsDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		var pm partitionMeta
		if data, err := os.ReadFile(filepath.Join(m.logsDir(), e.Name(), partitionMetaFile)); err == nil {
			if json.Unmarshal(data, &pm) != nil {
				m.log.Warn("unreadable partition metadata; treating the directory as legacy", "dir", e.Name())
			}
		}
		m.onDisk[e.Name()] = pm.TopicID
	}
	m.goroutines.Go(m.offlineLoop)
	m.goroutines.Go(m.reopenLoop)
	return m, nil
}

func (m *ReplicaManager) logsDir() string { return filepath.Join(m.cfg.DataDir, "logs") }

// NodeID is this node's id.
func (m *ReplicaManager) NodeID() int32 { return m.cfg.NodeID }

// ErrClusterMismatch is returned by Apply when the image belongs to a
// different cluster than the data dir: the node must not serve (and must
// never delete) that data.
var ErrClusterMismatch = errors.New("data dir belongs to another cluster")

// Apply brings the hosted partitions in line with im: it opens or creates
// the logs of partitions that name this node as a replica, sets their
// leader, leader epoch and config, and deletes the logs of partitions
// that no longer name it (deleted topics, moved replicas, topics
// re-created under a new id). It returns ErrClusterMismatch (and changes
// nothing) for an image of another cluster.
//
// Directories found at start that the image does not claim are deleted
// only when caughtUp: the broker has applied the metadata log through its
// own registration, so im holds every topic that existed when it started.
// An earlier image may be a prefix of the log (a controller still
// replaying it) that lacks topics which do exist.
//
// A log that cannot be opened because the process is out of file
// descriptors is not offline: Apply returns the error and opens it again
// later, in the background (resource.go).
func (m *ReplicaManager) Apply(im *controller.Image, now time.Time, caughtUp bool) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	return m.applyLocked(im, now, caughtUp)
}

// applyLocked is Apply with applyMu held.
func (m *ReplicaManager) applyLocked(im *controller.Image, now time.Time, caughtUp bool) error {
	if im.ClusterID == "" {
		return nil // a fresh quorum not yet bootstrapped: nothing to host
	}
	var reopen bool // a file could not be opened for want of descriptors
	defer func() { m.noteReopen(im, reopen) }()
	if m.clusterID == "" {
		if err := m.writeClusterMeta(im.ClusterID); err != nil {
			reopen = storage.IsResourceError(err)
			return err
		}
		m.clusterID = im.ClusterID
	} else if m.clusterID != im.ClusterID {
		return fmt.Errorf("%w: data dir has cluster id %s, controller has %s", ErrClusterMismatch, m.clusterID, im.ClusterID)
	}
	self := m.cfg.NodeID
	want := map[TopicPartition]bool{}
	var firstErr error
	// Images built by copy-on-write (controller.ImageEditor) share every
	// topic and partition a metadata update left alone with the image
	// applied before: such a partition needs nothing when the brokers did
	// not change either (replica liveness comes from them) and its replica
	// is open and online (issue 31: an update costs what it changes).
	prev := m.applied
	brokersSame := prev != nil && sameBrokers(prev, im)
	// A topic at the same pointer as in prev is wholly unchanged (a
	// copy-on-write image copies a topic to change any of its
	// partitions): with the brokers the same and no open to retry, it
	// needs nothing, and an update costs what it changes, not the number
	// of topics' partitions.
	fullPass := !brokersSame || m.reopen.image != nil
	type hostedPartition struct {
		tp    TopicPartition
		topic *controller.Topic
		ps    *controller.PartitionState
		tc    TopicConfig
	}
	var todo []hostedPartition
	var opens []int // indexes in todo of the partitions with no open replica
	// The changed topics, in name order (only they need the sort).
	names := make([]string, 0, len(im.Topics))
	for name, t := range im.Topics {
		if fullPass || prev.Topics[name] != t {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		t := im.Topics[name]
		var pt *controller.Topic // the same topic in prev, its id and configs unchanged
		if brokersSame {
			if pt = prev.Topics[name]; pt != nil && (pt.ID != t.ID || !maps.Equal(pt.Configs, t.Configs)) {
				pt = nil
			}
		}
		for i, ps := range t.Partitions {
			if !slices.Contains(ps.Replicas, self) {
				continue
			}
			tp := TopicPartition{Topic: name, Partition: int32(i)}
			want[tp] = true
			hosted := m.hostedReplica(tp)
			if pt != nil && i < len(pt.Partitions) && pt.Partitions[i] == ps {
				if hosted != nil && !hosted.Offline() {
					continue
				}
			}
			tc, err := ParseTopicConfig(t.Configs, int32(len(ps.Replicas)))
			if err != nil {
				// The controller validated it; keep going with defaults
				// rather than refuse to host the partition.
				m.log.Error("topic has an invalid config; using defaults", "topic", name, "err", err)
				tc, _ = ParseTopicConfig(nil, int32(len(ps.Replicas)))
			}
			if hosted == nil {
				opens = append(opens, len(todo))
			}
			todo = append(todo, hostedPartition{tp: tp, topic: t, ps: ps, tc: tc})
		}
	}
	// New logs (a creation: thousands at once) are opened in parallel:
	// each is a few file creations and fsyncs, mostly waiting (issue 31).
	// ensureReplica is safe for that (onDisk has its own lock).
	opened := make([]*Replica, len(todo))
	openErrs := make([]error, len(todo))
	m.parallel(len(opens), func(j int) {
		i := opens[j]
		h := todo[i]
		opened[i], openErrs[i] = m.ensureReplica(h.tp, h.topic.ID, h.tc, now)
	})
	for i, h := range todo {
		tp, ps, tc := h.tp, h.ps, h.tc
		p, err := opened[i], openErrs[i]
		if p == nil && err == nil {
			p, err = m.ensureReplica(tp, h.topic.ID, tc, now)
		}
		if err != nil {
			if _, offline := m.failure(tp); offline {
				continue // offline after a disk error: logged once (offline.go)
			}
			reopen = reopen || storage.IsResourceError(err)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		p.setLeadership(ps.Leader, ps.LeaderEpoch)
		if old := p.config.Load(); old.Storage != tc.Storage {
			p.log.SetConfig(tc.Storage)
		}
		p.config.Store(&tc)
		if p.Offline() {
			// Decision 42: an offline replica neither leads nor
			// follows, whatever the image says.
			m.stopServingLocked(p)
			continue
		}
		m.updateRole(p, ps, im, tc, now)
	}
	m.applied = im
	for _, p := range m.allReplicas() {
		if t := im.Topics[p.Topic]; !fullPass && t != nil && prev.Topics[p.Topic] == t {
			continue // an unchanged topic: its replicas stay
		}
		if !want[p.TopicPartition] {
			m.removeReplica(p)
		}
	}
	for _, f := range m.OfflineReplicas() {
		if !want[f.TopicPartition] {
			m.forgetFailure(f.TopicPartition, f.TopicID)
		}
	}
	for dir, id := range m.onDisk {
		if !caughtUp {
			break
		}
		if id == "" {
			m.log.Warn("partition directory without metadata left alone", "dir", dir)
			continue
		}
		m.log.Info("deleting log of a partition this node no longer hosts", "dir", dir)
		if err := os.RemoveAll(filepath.Join(m.logsDir(), dir)); err != nil && firstErr == nil {
			firstErr = err
		}
		delete(m.onDisk, dir)
	}
	return firstErr
}

// sameBrokers reports whether a and b hold the same broker records (the
// same pointers: an ImageEditor copies a broker only to change it).
func sameBrokers(a, b *controller.Image) bool {
	if len(a.Brokers) != len(b.Brokers) {
		return false
	}
	for id, br := range b.Brokers {
		if a.Brokers[id] != br {
			return false
		}
	}
	return true
}

// hostedReplica is tp's replica if this node hosts it.
func (m *ReplicaManager) hostedReplica(tp TopicPartition) *Replica {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.partitions[tp]
}

func (m *ReplicaManager) writeClusterMeta(id string) error {
	data, err := json.Marshal(clusterMeta{Version: 1, ClusterID: id, NodeID: m.cfg.NodeID})
	if err != nil {
		return err
	}
	dir := filepath.Join(m.cfg.DataDir, "meta")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return storage.WriteFileAtomic(filepath.Join(dir, clusterFile), data)
}

// maxParallelOpens bounds the logs Apply opens at once.
const maxParallelOpens = 4

// parallel runs fn(0..n-1) on up to maxParallelOpens goroutines and
// waits for them.
func (m *ReplicaManager) parallel(n int, fn func(i int)) {
	if n <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxParallelOpens) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// claimOnDisk removes name from the directories found at start and
// returns its topic id, if it was one of them.
func (m *ReplicaManager) claimOnDisk(name string) (string, bool) {
	m.onDiskMu.Lock()
	defer m.onDiskMu.Unlock()
	id, found := m.onDisk[name]
	if found {
		delete(m.onDisk, name)
	}
	return id, found
}

// ensureReplica returns the hosted replica of tp for topic id, opening
// its log from disk or creating it. A hosted replica or a directory of a
// different topic id is deleted first. Caller holds applyMu.
func (m *ReplicaManager) ensureReplica(tp TopicPartition, topicID string, tc TopicConfig, now time.Time) (*Replica, error) {
	m.mu.RLock()
	p := m.partitions[tp]
	m.mu.RUnlock()
	if p != nil {
		if p.TopicID == topicID {
			return p, nil
		}
		m.removeReplica(p)
	}
	if f, ok := m.failure(tp); ok {
		if f.TopicID == topicID {
			// Its log could not be opened: not again in this process.
			return nil, f.storageError(m.cfg.NodeID)
		}
		m.forgetFailure(tp, f.TopicID)
	}
	dir := filepath.Join(m.logsDir(), tp.String())
	// Decision 42: a log that cannot be created or opened is an offline
	// replica too, reported to the controller so that another replica
	// leads.
	failed := func(what string, err error) error {
		if storage.IsResourceError(err) {
			// Out of file descriptors: not a disk failure; reopenLoop
			// opens it again (resource.go).
			m.resourceError(tp, &storage.Failure{Op: storage.OpOpen, Path: dir, Err: err})
			return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "%s %s (out of file descriptors; retried): %w", what, tp, err)
		}
		m.replicaFailed(tp, topicID, dir, &storage.Failure{Op: storage.OpOpen, Path: dir, Err: err})
		return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "%s %s: %w", what, tp, err)
	}
	if id, found := m.claimOnDisk(tp.String()); found {
		if id != "" && id != topicID {
			m.log.Info("deleting log of an earlier topic with the same name", tp.LogAttr(), "old_topic_id", id)
			if err := os.RemoveAll(dir); err != nil {
				return nil, failed("remove old log", err)
			}
		}
	}
	// The logs directory exists (NewReplicaManager): one mkdir, not
	// MkdirAll's stat and mkdir. A directory it creates is new and empty:
	// the log starts without a recovery (storage.Options.Created).
	created := true
	if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
		created = false
	} else if err != nil {
		return nil, failed("create log", err)
	}
	// Written once, durably (two fsyncs): at a restart the file is
	// already there, and rewriting it for each of thousands of logs would
	// be most of the restart's time (issue 31).
	meta, _ := json.Marshal(partitionMeta{Version: 1, TopicID: topicID})
	metaPath := filepath.Join(dir, partitionMetaFile)
	// In a directory just made, before the log exists: a crash that
	// tears it leaves an empty directory with unreadable metadata, which
	// the next start treats as legacy (adopted by the same partition, or
	// left alone) — no data is at stake, so no temp file and rename.
	if created {
		if err := storage.WriteFileNew(metaPath, meta); err != nil {
			return nil, failed("write metadata of", err)
		}
	} else if cur, err := os.ReadFile(metaPath); err != nil || !bytes.Equal(cur, meta) {
		if err := storage.WriteFileAtomic(metaPath, meta); err != nil {
			return nil, failed("write metadata of", err)
		}
	}
	l, err := storage.OpenWith(dir, tc.Storage, now, storage.Options{
		Faults:          m.cfg.StorageFaults,
		OnFailure:       func(f *storage.Failure) { m.replicaFailed(tp, topicID, dir, f) },
		OnResourceError: func(f *storage.Failure) { m.resourceError(tp, f) },
		PageCacheWindow: m.cfg.PageCacheWindow,
		HighWatermarks:  m.hws,
		RecoveryPoints:  m.rps,
		Created:         created,
	})
	if err != nil {
		return nil, failed("open log", err)
	}
	if err := l.ProducerStateError(); err != nil {
		m.log.Error("idempotent-producer state rebuilt only partly: retries of later batches may not be deduplicated", tp.LogAttr(), "err", err)
	}
	p = &Replica{TopicPartition: tp, TopicID: topicID, log: l, events: m.events, isrQueue: &m.isrQueue, hwCh: make(chan struct{}),
		following: controller.NoLeader, followEpoch: -1}
	p.setLeadership(controller.NoLeader, -1)
	p.config.Store(&tc)
	l.SetChangeHook(p.signalWatchers)
	m.mu.Lock()
	m.partitions[tp] = p
	m.mu.Unlock()
	return p, nil
}

// removeReplica stops hosting p and deletes its log.
func (m *ReplicaManager) removeReplica(p *Replica) {
	if m.fetchers != nil {
		m.fetchers.unfollow(p.TopicPartition)
	}
	p.roleMu.Lock()
	p.dropTrackerLocked()
	p.roleMu.Unlock()
	m.mu.Lock()
	if m.partitions[p.TopicPartition] == p {
		delete(m.partitions, p.TopicPartition)
	}
	m.mu.Unlock()
	m.forgetFailure(p.TopicPartition, p.TopicID)
	if err := p.log.Delete(); err != nil {
		m.log.Error("delete log", p.LogAttr(), "err", err)
		return
	}
	m.log.Info("deleted log", p.LogAttr(), "topic_id", p.TopicID)
}

// Replicas returns the hosted replicas, in no particular order.
func (m *ReplicaManager) Replicas() []*Replica { return m.allReplicas() }

func (m *ReplicaManager) allReplicas() []*Replica {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Replica, 0, len(m.partitions))
	for _, p := range m.partitions {
		out = append(out, p)
	}
	return out
}

// Replica returns the replica of topic/partition hosted here, or
// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR when it is offline
// here after a disk error (decision 42: the message names the directory,
// the file and the OS error).
func (m *ReplicaManager) Replica(topic string, partition int32) (*Replica, error) {
	tp := TopicPartition{Topic: topic, Partition: partition}
	m.mu.RLock()
	p, ok := m.partitions[tp]
	m.mu.RUnlock()
	if !ok || p.Offline() {
		if f, failed := m.failure(tp); failed {
			return nil, f.storageError(m.cfg.NodeID)
		}
	}
	if !ok {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d is not hosted by node %d", topic, partition, m.cfg.NodeID)
	}
	if f := p.log.Failure(); f != nil {
		// Its hook has not recorded it yet (a moment): the log's own account.
		return nil, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "partition %s at %s is offline on node %d after a disk error: %w", tp, p.log.Dir(), m.cfg.NodeID, f)
	}
	return p, nil
}

// Close stops background work, resigns every leadership (listeners hear
// Resigned; acks=all waiters see the leadership gone), closes every log
// cleanly (writing the clean-shutdown markers), and waits until the
// listeners have been told. It must not be called from a listener.
func (m *ReplicaManager) Close() error {
	m.cancel()
	m.applyMu.Lock()
	fetchers := m.fetchers
	m.applyMu.Unlock()
	if fetchers != nil {
		fetchers.close()
	}
	m.goroutines.Wait()
	m.sessions.closeAll()
	m.applyMu.Lock()
	for _, p := range m.allReplicas() {
		p.roleMu.Lock()
		p.dropTrackerLocked()
		p.roleMu.Unlock()
	}
	m.mu.Lock()
	var first error
	for tp, p := range m.partitions {
		if err := p.log.Close(); err != nil && first == nil && !p.Offline() {
			first = fmt.Errorf("close %s: %w", tp, err)
		}
		delete(m.partitions, tp)
	}
	m.mu.Unlock()
	m.applyMu.Unlock()
	if err := m.flushHighWatermarks(); err != nil && first == nil {
		first = err
	}
	m.events.closeAndWait()
	return first
}

// flushHighWatermarks writes the data directory's shared checkpoints —
// high watermarks and recovery points — each only if a value in it
// changed (storage.OffsetCheckpoint.Flush). A failure is the data
// directory's: every log in it recorded its value there, so it is logged
// and retried at the next interval; the logs stay online (a disk that
// cannot take this write fails their own writes soon enough). A recovery
// point that is not written only makes a recovery after a crash scan
// more.
func (m *ReplicaManager) flushHighWatermarks() error {
	var first error
	for _, c := range []struct {
		what  string
		store *storage.OffsetCheckpoint
	}{{"high watermark", m.hws}, {"recovery point", m.rps}} {
		err := c.store.Flush(m.cfg.StorageFaults)
		switch {
		case err == nil:
		case storage.IsResourceError(err):
			// Out of descriptors: counted and logged; the next interval
			// tries again (resource.go).
			m.resourceError(TopicPartition{}, &storage.Failure{Op: storage.OpWrite, Path: c.store.Path(), Err: err})
		default:
			m.log.Warn(c.what+" checkpoint failed", "path", c.store.Path(), "err", err)
			if first == nil {
				first = fmt.Errorf("%s checkpoint %s: %w", c.what, c.store.Path(), err)
			}
		}
	}
	return first
}

// ReplicationConfig connects a ReplicaManager to the cluster: where
// leaders are (the metadata cache), how to reach other brokers, the
// controller (AlterPartition) and this broker's epoch.
type ReplicationConfig struct {
	Metadata    *MetadataCache
	Pool        *ConnPool
	Controllers *ControllerClient
	BrokerEpoch func() int64
	// LagTimeMax is replica.lag.time.max.ms; 0 means the default.
	LagTimeMax time.Duration
}

// StartReplication starts follower fetchers and the leaders' ISR upkeep.
// Call it once, before the first Apply that should replicate; without it
// the manager hosts leaders only (tests of a single node).
func (m *ReplicaManager) StartReplication(rc ReplicationConfig) {
	if rc.LagTimeMax <= 0 {
		rc.LagTimeMax = DefaultReplicaLagTimeMax
	}
	m.applyMu.Lock()
	m.repl.Store(&rc)
	m.fetchers = newFetcherManager(m, rc.Pool, m.log)
	m.applyMu.Unlock()
	m.goroutines.Go(m.isrLoop)
}

func (m *ReplicaManager) metadata() *MetadataCache { return m.repl.Load().Metadata }

// SetFetchPaused stops (or resumes) every follower fetch of this broker, as
// if its fetchers hung: fault injection for tests. Heartbeats continue.
func (m *ReplicaManager) SetFetchPaused(paused bool) { m.fetchPaused.Store(paused) }

func (m *ReplicaManager) brokerEpoch() int64 {
	rc := m.repl.Load()
	if rc == nil || rc.BrokerEpoch == nil {
		return 0
	}
	return rc.BrokerEpoch()
}

func (m *ReplicaManager) lagTimeMax() time.Duration {
	rc := m.repl.Load()
	if rc == nil {
		return DefaultReplicaLagTimeMax
	}
	return rc.LagTimeMax
}
