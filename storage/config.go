// Package storage is a partition's log on disk: segment files of framed
// canonical batches (proto/batch) with sparse offset and time indexes,
// rolling, retention, compaction (cleaner.go), checkpoints and crash
// recovery (DESIGN §5).
package storage

import (
	"sort"
	"strconv"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// MaxMessageBytesLimit is the largest max.message.bytes accepted; it keeps
// every batch well below the gRPC message limit.
const MaxMessageBytesLimit = 32 << 20

// Config is a topic's storage configuration. Field comments give the Kafka
// config key.
type Config struct {
	SegmentBytes       int64  // segment.bytes
	SegmentMs          int64  // segment.ms
	RetentionMs        int64  // retention.ms; -1 = unlimited
	RetentionBytes     int64  // retention.bytes; -1 = unlimited
	MaxMessageBytes    int32  // max.message.bytes: largest batch accepted
	CleanupPolicy      string // cleanup.policy: delete, compact or compact,delete (cleaner.go)
	IndexIntervalBytes int    // index.interval.bytes
	FlushMessages      int64  // flush.messages; 0 = never fsync per batch
	FlushMs            int64  // flush.ms; 0 = never by time
	// Compaction (cleaner.go), used when CleanupPolicy includes compact.
	DeleteRetentionMs      int64   // delete.retention.ms: how long tombstones and markers outlive cleaning
	MinCompactionLagMs     int64   // min.compaction.lag.ms: records younger than this are not compacted
	MinCleanableDirtyRatio float64 // min.cleanable.dirty.ratio: in [0, 1]
}

// Cleanup policies (cleanup.policy). "delete,compact" is accepted as
// PolicyCompactDelete.
const (
	PolicyDelete        = "delete"
	PolicyCompact       = "compact"
	PolicyCompactDelete = "compact,delete"
)

// Compacted reports whether the log cleaner compacts the log by key.
func (c Config) Compacted() bool {
	return c.CleanupPolicy == PolicyCompact || c.CleanupPolicy == PolicyCompactDelete
}

// Deletes reports whether time and size retention delete segments.
func (c Config) Deletes() bool {
	return c.CleanupPolicy == PolicyDelete || c.CleanupPolicy == PolicyCompactDelete
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:       1 << 30,
		SegmentMs:          7 * 24 * 3600 * 1000,
		RetentionMs:        7 * 24 * 3600 * 1000,
		RetentionBytes:     -1,
		MaxMessageBytes:    1048588,
		CleanupPolicy:      "delete",
		IndexIntervalBytes: 4096,

		DeleteRetentionMs:      24 * 3600 * 1000,
		MinCompactionLagMs:     0,
		MinCleanableDirtyRatio: 0.5,
	}
}

// ignoredKeys are topic configs handled outside storage; ParseConfig
// accepts and ignores them.
var ignoredKeys = map[string]bool{
	"min.insync.replicas":            true,
	"unclean.leader.election.enable": true,
	"message.timestamp.type":         true,
	"compression.type":               true,
}

func badConfig(key, val, rule string) error {
	return errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "%s=%q: %s", key, errs.Echo(val), rule)
}

// ParseConfig returns the defaults overridden by m. Unknown keys and bad
// values are INVALID_CONFIG errors naming the key.
func ParseConfig(m map[string]string) (Config, error) {
	c := DefaultConfig()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		i64 := func(lo int64) (int64, error) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < lo {
				return 0, badConfig(k, v, "must be an integer >= "+strconv.FormatInt(lo, 10))
			}
			return n, nil
		}
		var err error
		switch k {
		case "segment.bytes":
			c.SegmentBytes, err = i64(1024)
			if err == nil && c.SegmentBytes > 1<<31-1 {
				err = badConfig(k, v, "must be at most 2147483647")
			}
		case "segment.ms":
			c.SegmentMs, err = i64(1)
		case "retention.ms":
			c.RetentionMs, err = i64(-1)
		case "retention.bytes":
			c.RetentionBytes, err = i64(-1)
		case "max.message.bytes":
			var n int64
			n, err = i64(128)
			if err == nil && n > MaxMessageBytesLimit {
				err = badConfig(k, v, "must be at most "+strconv.Itoa(MaxMessageBytesLimit))
			}
			c.MaxMessageBytes = int32(n)
		case "cleanup.policy":
			switch v {
			case PolicyDelete, PolicyCompact, PolicyCompactDelete:
				c.CleanupPolicy = v
			case "delete,compact":
				c.CleanupPolicy = PolicyCompactDelete
			default:
				err = badConfig(k, v, "must be delete, compact or compact,delete")
			}
		case "delete.retention.ms":
			c.DeleteRetentionMs, err = i64(0)
		case "min.compaction.lag.ms":
			c.MinCompactionLagMs, err = i64(0)
		case "min.cleanable.dirty.ratio":
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || !(f >= 0 && f <= 1) {
				err = badConfig(k, v, "must be a number in [0, 1]")
			}
			c.MinCleanableDirtyRatio = f
		case "index.interval.bytes":
			var n int64
			n, err = i64(0)
			c.IndexIntervalBytes = int(n)
		case "flush.messages":
			c.FlushMessages, err = i64(0)
		case "flush.ms":
			c.FlushMs, err = i64(0)
		default:
			if !ignoredKeys[k] {
				err = errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "unknown topic config %q", errs.Echo(k))
			}
		}
		if err != nil {
			return Config{}, err
		}
	}
	return c, c.Validate()
}

// Validate checks the ranges ParseConfig enforces, for configs built in code.
func (c Config) Validate() error {
	switch {
	case c.SegmentBytes < 1024:
		return badConfig("segment.bytes", strconv.FormatInt(c.SegmentBytes, 10), "must be >= 1024")
	case c.SegmentMs < 1:
		return badConfig("segment.ms", strconv.FormatInt(c.SegmentMs, 10), "must be >= 1")
	case c.MaxMessageBytes < 128 || c.MaxMessageBytes > MaxMessageBytesLimit:
		return badConfig("max.message.bytes", strconv.Itoa(int(c.MaxMessageBytes)), "out of range")
	case c.IndexIntervalBytes < 0:
		return badConfig("index.interval.bytes", strconv.Itoa(c.IndexIntervalBytes), "must be >= 0")
	case c.RetentionMs < -1:
		return badConfig("retention.ms", strconv.FormatInt(c.RetentionMs, 10), "must be >= -1")
	case c.RetentionBytes < -1:
		return badConfig("retention.bytes", strconv.FormatInt(c.RetentionBytes, 10), "must be >= -1")
	case c.FlushMessages < 0:
		return badConfig("flush.messages", strconv.FormatInt(c.FlushMessages, 10), "must be >= 0")
	case c.FlushMs < 0:
		return badConfig("flush.ms", strconv.FormatInt(c.FlushMs, 10), "must be >= 0")
	case c.CleanupPolicy != PolicyDelete && c.CleanupPolicy != PolicyCompact && c.CleanupPolicy != PolicyCompactDelete:
		return badConfig("cleanup.policy", c.CleanupPolicy, "must be delete, compact or compact,delete")
	case c.DeleteRetentionMs < 0:
		return badConfig("delete.retention.ms", strconv.FormatInt(c.DeleteRetentionMs, 10), "must be >= 0")
	case c.MinCompactionLagMs < 0:
		return badConfig("min.compaction.lag.ms", strconv.FormatInt(c.MinCompactionLagMs, 10), "must be >= 0")
	case !(c.MinCleanableDirtyRatio >= 0 && c.MinCleanableDirtyRatio <= 1):
		return badConfig("min.cleanable.dirty.ratio", strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64), "must be a number in [0, 1]")
	}
	return nil
}

// Map returns every storage config's effective value.
func (c Config) Map() map[string]string {
	return map[string]string{
		"segment.bytes":        strconv.FormatInt(c.SegmentBytes, 10),
		"segment.ms":           strconv.FormatInt(c.SegmentMs, 10),
		"retention.ms":         strconv.FormatInt(c.RetentionMs, 10),
		"retention.bytes":      strconv.FormatInt(c.RetentionBytes, 10),
		"max.message.bytes":    strconv.Itoa(int(c.MaxMessageBytes)),
		"cleanup.policy":       c.CleanupPolicy,
		"index.interval.bytes": strconv.Itoa(c.IndexIntervalBytes),
		"flush.messages":       strconv.FormatInt(c.FlushMessages, 10),
		"flush.ms":             strconv.FormatInt(c.FlushMs, 10),

		"delete.retention.ms":       strconv.FormatInt(c.DeleteRetentionMs, 10),
		"min.compaction.lag.ms":     strconv.FormatInt(c.MinCompactionLagMs, 10),
		"min.cleanable.dirty.ratio": strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64),
	}
}
