// Package cluster holds the broker's view of the cluster: topic metadata and
// the partition replicas this node hosts. Today Sluice runs as one node and
// the topic catalog is a local file; the Raft controller (DESIGN §6) will
// replace Catalog as the source of metadata.
package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Limits on topic creation; requests beyond them are refused, not clamped.
const (
	MaxTopicNameLength = 249
	MaxPartitions      = 10000
)

// Topic is the metadata of one topic.
type Topic struct {
	Name              string            `json:"name"`
	ID                string            `json:"id"`
	Partitions        int32             `json:"partitions"`
	ReplicationFactor int32             `json:"replication_factor"`
	Configs           map[string]string `json:"configs,omitempty"` // as given by the user
}

// catalogFile is the on-disk form of the catalog.
type catalogFile struct {
	Version   int      `json:"version"`
	ClusterID string   `json:"cluster_id"`
	Topics    []*Topic `json:"topics"`
}

// Catalog is the persistent set of topics of a single-node cluster. It is
// safe for concurrent use. Every change is written to disk (temp file,
// fsync, rename) before it becomes visible.
type Catalog struct {
	path string

	mu        sync.RWMutex // guards the following
	clusterID string
	topics    map[string]*Topic
}

// OpenCatalog loads the catalog at path, creating an empty one (with a new
// cluster id) if the file does not exist.
func OpenCatalog(path string) (*Catalog, error) {
	c := &Catalog{path: path, topics: map[string]*Topic{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.clusterID = newID()
		if err := c.persistLocked(); err != nil {
			return nil, err
		}
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("read topic catalog: %w", err)
	}
	var f catalogFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("topic catalog %s is corrupt: %w", path, err)
	}
	c.clusterID = f.ClusterID
	for _, t := range f.Topics {
		c.topics[t.Name] = t
	}
	return c, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ClusterID is the id generated when the catalog was first created.
func (c *Catalog) ClusterID() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.clusterID
}

// Topic returns a copy of the named topic's metadata.
func (c *Catalog) Topic(name string) (Topic, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.topics[name]
	if !ok {
		return Topic{}, false
	}
	return *t, true
}

// Topics returns all topics sorted by name.
func (c *Catalog) Topics() []Topic {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Topic, 0, len(c.topics))
	for _, t := range c.topics {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Add persists a new topic. It fails with TOPIC_ALREADY_EXISTS if the name
// is taken; validation is the caller's (ValidateNewTopic).
func (c *Catalog) Add(t Topic) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.topics[t.Name]; ok {
		return errs.New(sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, "topic %q already exists", t.Name)
	}
	t.ID = newID()
	c.topics[t.Name] = &t
	if err := c.persistLocked(); err != nil {
		delete(c.topics, t.Name)
		return err
	}
	return nil
}

// Remove persists the removal of a topic.
func (c *Catalog) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.topics[name]
	if !ok {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", name)
	}
	delete(c.topics, name)
	if err := c.persistLocked(); err != nil {
		c.topics[name] = t
		return err
	}
	return nil
}

func (c *Catalog) persistLocked() error {
	f := catalogFile{Version: 1, ClusterID: c.clusterID}
	for _, t := range c.topics {
		f.Topics = append(f.Topics, t)
	}
	sort.Slice(f.Topics, func(i, j int) bool { return f.Topics[i].Name < f.Topics[j].Name })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	return storage.WriteFileAtomic(c.path, data)
}

// ValidateTopicName applies Kafka's naming rules: 1..249 characters of
// [a-zA-Z0-9._-], not "." or "..". Names starting with "__" are reserved
// for internal topics.
func ValidateTopicName(name string) error {
	bad := func(why string) error {
		return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic name %q is invalid: %s", name, why)
	}
	switch {
	case name == "":
		return bad("it is empty")
	case len(name) > MaxTopicNameLength:
		return bad(fmt.Sprintf("longer than %d characters", MaxTopicNameLength))
	case name == "." || name == "..":
		return bad("'.' and '..' are not allowed")
	}
	for _, r := range name {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return bad("only ASCII letters, digits, '.', '_' and '-' are allowed")
		}
	}
	if len(name) >= 2 && name[:2] == "__" {
		return bad("names starting with '__' are reserved for internal topics")
	}
	return nil
}

// TopicConfig is a topic's full configuration: storage settings plus those
// the broker applies itself.
type TopicConfig struct {
	Storage           storage.Config
	MinInsyncReplicas int32
	UncleanElection   bool
}

// ParseTopicConfig validates user-supplied topic configs and returns the
// effective configuration. Errors are INVALID_CONFIG naming the key.
func ParseTopicConfig(m map[string]string, replicationFactor int32) (TopicConfig, error) {
	sc, err := storage.ParseConfig(m)
	if err != nil {
		return TopicConfig{}, err
	}
	tc := TopicConfig{Storage: sc, MinInsyncReplicas: 1}
	if v, ok := m["min.insync.replicas"]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "min.insync.replicas must be an integer >= 1, got %q", v)
		}
		if int32(n) > replicationFactor {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "min.insync.replicas %d exceeds the replication factor %d", n, replicationFactor)
		}
		tc.MinInsyncReplicas = int32(n)
	}
	if v, ok := m["unclean.leader.election.enable"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "unclean.leader.election.enable must be true or false, got %q", v)
		}
		tc.UncleanElection = b
	}
	if v, ok := m["message.timestamp.type"]; ok && v != "CreateTime" {
		return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "message.timestamp.type %q is not supported (only CreateTime)", v)
	}
	return tc, nil
}

// Map returns every effective config value, for describe.
func (tc TopicConfig) Map() map[string]string {
	m := tc.Storage.Map()
	m["min.insync.replicas"] = strconv.Itoa(int(tc.MinInsyncReplicas))
	m["unclean.leader.election.enable"] = strconv.FormatBool(tc.UncleanElection)
	m["message.timestamp.type"] = "CreateTime"
	return m
}
