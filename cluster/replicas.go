package cluster

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// Partition is a replica hosted by this node. Its Log is safe for
// concurrent use; Config is fixed for the replica's lifetime.
type Partition struct {
	TopicPartition
	Log    *storage.Log
	Config TopicConfig
	// LeaderEpoch is the epoch stamped on appended batches. With a single
	// node it stays 0; the controller will own it.
	LeaderEpoch int32
}

// ReplicaManagerConfig configures a ReplicaManager.
type ReplicaManagerConfig struct {
	DataDir string
	NodeID  int32
	// RetentionCheckInterval is how often retention runs
	// (log.retention.check.interval.ms); 0 means 5 minutes.
	RetentionCheckInterval time.Duration
	Logger                 *slog.Logger
}

// ReplicaManager owns the partition logs of this node and the topic
// catalog. Safe for concurrent use.
type ReplicaManager struct {
	cfg     ReplicaManagerConfig
	catalog *Catalog
	log     *slog.Logger

	// topicMu serialises topic creation and deletion (catalog + logs).
	topicMu sync.Mutex

	mu         sync.RWMutex // guards the following
	partitions map[TopicPartition]*Partition

	stop chan struct{}
	wg   sync.WaitGroup
}

// NewReplicaManager opens the catalog in dataDir/meta and every partition
// log it lists under dataDir/logs. Log directories not in the catalog are
// left-overs of an interrupted delete and are removed.
func NewReplicaManager(cfg ReplicaManagerConfig, now time.Time) (*ReplicaManager, error) {
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cat, err := OpenCatalog(filepath.Join(cfg.DataDir, "meta", "topics.json"))
	if err != nil {
		return nil, err
	}
	m := &ReplicaManager{
		cfg:        cfg,
		catalog:    cat,
		log:        cfg.Logger,
		partitions: map[TopicPartition]*Partition{},
		stop:       make(chan struct{}),
	}
	if err := os.MkdirAll(m.logsDir(), 0o755); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, t := range cat.Topics() {
		tc, err := ParseTopicConfig(t.Configs, t.ReplicationFactor)
		if err != nil {
			m.closeAll()
			return nil, fmt.Errorf("topic %q has an invalid stored config: %w", t.Name, err)
		}
		for p := int32(0); p < t.Partitions; p++ {
			tp := TopicPartition{t.Name, p}
			want[tp.String()] = true
			if err := m.openPartition(tp, tc, now); err != nil {
				m.closeAll()
				return nil, err
			}
		}
	}
	entries, err := os.ReadDir(m.logsDir())
	if err != nil {
		m.closeAll()
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && !want[e.Name()] {
			m.log.Warn("removing log directory of a deleted topic", "dir", e.Name())
			_ = os.RemoveAll(filepath.Join(m.logsDir(), e.Name()))
		}
	}
	return m, nil
}

func (m *ReplicaManager) logsDir() string { return filepath.Join(m.cfg.DataDir, "logs") }

func (m *ReplicaManager) openPartition(tp TopicPartition, tc TopicConfig, now time.Time) error {
	l, err := storage.Open(filepath.Join(m.logsDir(), tp.String()), tc.Storage, now)
	if err != nil {
		return fmt.Errorf("open log %s: %w", tp, err)
	}
	m.mu.Lock()
	m.partitions[tp] = &Partition{TopicPartition: tp, Log: l, Config: tc}
	m.mu.Unlock()
	return nil
}

// Catalog returns the topic catalog.
func (m *ReplicaManager) Catalog() *Catalog { return m.catalog }

// NodeID is this node's id.
func (m *ReplicaManager) NodeID() int32 { return m.cfg.NodeID }

// Start runs the retention loop until Close.
func (m *ReplicaManager) Start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.cfg.RetentionCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case now := <-t.C:
				m.EnforceRetention(now)
			}
		}
	}()
}

// EnforceRetention applies retention to every partition once.
func (m *ReplicaManager) EnforceRetention(now time.Time) {
	for _, p := range m.allPartitions() {
		if n, err := p.Log.EnforceRetention(now); err != nil {
			m.log.Error("retention failed", "partition", p.String(), "err", err)
		} else if n > 0 {
			m.log.Info("retention deleted segments", "partition", p.String(), "segments", n, "log_start_offset", p.Log.StartOffset())
		}
	}
}

func (m *ReplicaManager) allPartitions() []*Partition {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Partition, 0, len(m.partitions))
	for _, p := range m.partitions {
		out = append(out, p)
	}
	return out
}

// Close stops background work and closes every log cleanly (writing the
// clean-shutdown markers).
func (m *ReplicaManager) Close() error {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.wg.Wait()
	return m.closeAll()
}

func (m *ReplicaManager) closeAll() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for tp, p := range m.partitions {
		if err := p.Log.Close(); err != nil && first == nil {
			first = fmt.Errorf("close %s: %w", tp, err)
		}
		delete(m.partitions, tp)
	}
	return first
}

// Partition returns the replica of topic/partition, or
// UNKNOWN_TOPIC_OR_PARTITION.
func (m *ReplicaManager) Partition(topic string, partition int32) (*Partition, error) {
	m.mu.RLock()
	p, ok := m.partitions[TopicPartition{topic, partition}]
	m.mu.RUnlock()
	if !ok {
		if _, known := m.catalog.Topic(topic); known {
			return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q has no partition %d", topic, partition)
		}
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", topic)
	}
	return p, nil
}

// CreateTopic validates and creates a topic with its partition logs. With
// validateOnly it only validates. Errors are *errs.Error.
func (m *ReplicaManager) CreateTopic(name string, partitions, replicationFactor int32, configs map[string]string, validateOnly bool, now time.Time) (Topic, TopicConfig, error) {
	if err := ValidateTopicName(name); err != nil {
		return Topic{}, TopicConfig{}, err
	}
	if partitions < 1 || partitions > MaxPartitions {
		return Topic{}, TopicConfig{}, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "number of partitions must be between 1 and %d, got %d", MaxPartitions, partitions)
	}
	brokers := int32(1)
	if replicationFactor < 1 || replicationFactor > brokers {
		return Topic{}, TopicConfig{}, errs.New(sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR, "replication factor must be between 1 and the number of brokers (%d), got %d", brokers, replicationFactor)
	}
	tc, err := ParseTopicConfig(configs, replicationFactor)
	if err != nil {
		return Topic{}, TopicConfig{}, err
	}
	t := Topic{Name: name, Partitions: partitions, ReplicationFactor: replicationFactor, Configs: copyMap(configs)}
	m.topicMu.Lock()
	defer m.topicMu.Unlock()
	if _, exists := m.catalog.Topic(name); exists {
		return Topic{}, TopicConfig{}, errs.New(sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, "topic %q already exists", name)
	}
	if validateOnly {
		return t, tc, nil
	}
	// The catalog entry is durable before the logs exist: a crash in
	// between leaves a topic whose logs are created at the next start.
	if err := m.catalog.Add(t); err != nil {
		return Topic{}, TopicConfig{}, err
	}
	for p := int32(0); p < partitions; p++ {
		if err := m.openPartition(TopicPartition{name, p}, tc, now); err != nil {
			return Topic{}, TopicConfig{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "%v", err)
		}
	}
	t, _ = m.catalog.Topic(name)
	return t, tc, nil
}

// DeleteTopic removes a topic from the catalog, then deletes its logs.
func (m *ReplicaManager) DeleteTopic(name string) error {
	if strings.TrimSpace(name) == "" {
		return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic name is empty")
	}
	m.topicMu.Lock()
	defer m.topicMu.Unlock()
	t, ok := m.catalog.Topic(name)
	if !ok {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", name)
	}
	// Removal is durable first: a crash before the logs are gone leaves
	// orphan directories that the next start removes.
	if err := m.catalog.Remove(name); err != nil {
		return err
	}
	var first error
	for p := int32(0); p < t.Partitions; p++ {
		tp := TopicPartition{name, p}
		m.mu.Lock()
		part := m.partitions[tp]
		delete(m.partitions, tp)
		m.mu.Unlock()
		if part != nil {
			if err := part.Log.Delete(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Append validates a batch as a producer sent it and appends it to the
// partition. Nothing is written unless every check passes. Errors are
// *errs.Error with the code to return for the partition.
func (m *ReplicaManager) Append(topic string, partition int32, raw []byte, now time.Time) (storage.AppendResult, error) {
	p, err := m.Partition(topic, partition)
	if err != nil {
		return storage.AppendResult{}, err
	}
	if max := p.Config.Storage.MaxMessageBytes; len(raw) > int(max) {
		return storage.AppendResult{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d of topic %q", len(raw), max, topic)
	}
	b, h, err := batch.Canonicalize(raw)
	if err != nil {
		return storage.AppendResult{}, err
	}
	switch {
	case h.IsControl():
		return storage.AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producers cannot write control batches")
	case h.IsTransactional():
		return storage.AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "transactional batches are not supported yet")
	case h.ProducerID != batch.NoProducerID:
		return storage.AppendResult{}, errs.New(sluicev1.ErrorCode_UNKNOWN_PRODUCER_ID, "producer id %d is unknown: idempotent producers are not supported yet; send producer_id -1", h.ProducerID)
	}
	res, err := p.Log.Append(b, p.LeaderEpoch, now)
	if err != nil {
		if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
			return res, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "append to %s: %v", p, err)
		}
		return res, err
	}
	return res, nil
}

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
