package cluster

import (
	"slices"
	"sort"
	"strings"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Describing and altering a topic's configs (Kafka's DescribeConfigs,
// IncrementalAlterConfigs and AlterConfigs on a topic resource): the
// rules every door uses. The controller applies an alteration to the
// configs it holds (controller.AlterTopicConfigs) with AlterTopicConfigs
// or ReplaceTopicConfigs as the edit.

// ConfigType is a config's type as Kafka's DescribeConfigs (v3+) names
// it.
type ConfigType int8

// Kafka's config types.
const (
	ConfigTypeBoolean ConfigType = 1
	ConfigTypeString  ConfigType = 2
	ConfigTypeInt     ConfigType = 3
	ConfigTypeLong    ConfigType = 5
	ConfigTypeDouble  ConfigType = 6
	ConfigTypeList    ConfigType = 7
)

// TopicConfigDef describes one topic config.
type TopicConfigDef struct {
	Name string
	Type ConfigType
	// Doc is one line of documentation.
	Doc string
}

// topicConfigDefs describes every topic config Sluice knows (the keys
// of TopicConfig.Map; TestTopicConfigDefsCoverEveryConfig checks it).
var topicConfigDefs = map[string]TopicConfigDef{
	"segment.bytes":                  {Type: ConfigTypeInt, Doc: "The size at which a log segment is rolled (bytes)."},
	"segment.ms":                     {Type: ConfigTypeLong, Doc: "The age at which a log segment is rolled even if not full (ms)."},
	"retention.ms":                   {Type: ConfigTypeLong, Doc: "How long a segment is kept before it is deleted (ms); -1 for no limit. Applies under the delete cleanup policy."},
	"retention.bytes":                {Type: ConfigTypeLong, Doc: "The size a partition's log is kept to by deleting its oldest segments (bytes); -1 for no limit."},
	"max.message.bytes":              {Type: ConfigTypeInt, Doc: "The largest record batch the topic accepts (bytes; a compressed batch counts its compressed size)."},
	"compression.type":               {Type: ConfigTypeString, Doc: "producer (keep each batch as the producer compressed it), uncompressed, gzip, snappy, lz4 or zstd (the broker converts batches of another codec on append)."},
	"cleanup.policy":                 {Type: ConfigTypeList, Doc: "delete (old segments are deleted by retention), compact (the log keeps the last record of each key), or both."},
	"index.interval.bytes":           {Type: ConfigTypeInt, Doc: "How many bytes of log separate two entries of the offset index."},
	"flush.messages":                 {Type: ConfigTypeLong, Doc: "Fsync the log after this many batches; 0 leaves durability to replication."},
	"flush.ms":                       {Type: ConfigTypeLong, Doc: "Fsync the log at least this often (ms); 0 leaves durability to replication."},
	"delete.retention.ms":            {Type: ConfigTypeLong, Doc: "How long tombstones and transaction markers outlive the cleaning of a compacted log (ms)."},
	"min.compaction.lag.ms":          {Type: ConfigTypeLong, Doc: "How long a record stays uncompacted after it is written (ms)."},
	"min.cleanable.dirty.ratio":      {Type: ConfigTypeDouble, Doc: "The share of a compacted log not yet cleaned above which the cleaner cleans it."},
	"min.insync.replicas":            {Type: ConfigTypeInt, Doc: "The fewest in-sync replicas with which an acks=all produce succeeds. Deleting it gives the topic the cluster default again."},
	"unclean.leader.election.enable": {Type: ConfigTypeBoolean, Doc: "Whether a replica outside the ISR may be elected leader when no ISR member is live, losing records."},
	"message.timestamp.type":         {Type: ConfigTypeString, Doc: "Which timestamp records keep: CreateTime (the producer's) or LogAppendTime (the leader's clock at the append, every record of a batch alike)."},
}

// topicConfigDef is name's description (type STRING and no documentation
// for a config the table does not describe).
func topicConfigDef(name string) TopicConfigDef {
	d, ok := topicConfigDefs[name]
	if !ok {
		d.Type = ConfigTypeString
	}
	d.Name = name
	return d
}

// defaultTopicConfig is the effective value of every topic config when
// the topic sets none.
func defaultTopicConfig() map[string]string {
	tc, _ := ParseTopicConfig(nil, 1)
	return tc.Map()
}

// TopicConfigEntry is one config of a topic as DescribeConfigs answers
// it.
type TopicConfigEntry struct {
	TopicConfigDef
	// Value is the effective value (what the brokers apply).
	Value string
	// Set: the topic sets the config (Kafka's source
	// DYNAMIC_TOPIC_CONFIG); else Value is the default (DEFAULT_CONFIG).
	Set bool
	// Default is the value the topic would have without its setting.
	Default string
}

// DescribeTopicConfigs returns every config of a topic whose settings
// are configs and replication factor rf, by name: its effective value,
// whether the topic sets it, and its default. Settings that do not parse
// (the controller validated them, so none should) are answered as set,
// the effective values then being the defaults'.
func DescribeTopicConfigs(configs map[string]string, rf int32) []TopicConfigEntry {
	tc, err := ParseTopicConfig(configs, rf)
	if err != nil {
		tc, _ = ParseTopicConfig(nil, rf)
	}
	eff, defs := tc.Map(), defaultTopicConfig()
	names := make([]string, 0, len(eff))
	for name := range eff {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]TopicConfigEntry, 0, len(names))
	for _, name := range names {
		_, set := configs[name]
		out = append(out, TopicConfigEntry{TopicConfigDef: topicConfigDef(name), Value: eff[name], Set: set, Default: defs[name]})
	}
	return out
}

// ConfigOpType is an operation of Kafka's IncrementalAlterConfigs.
type ConfigOpType int8

// Kafka's IncrementalAlterConfigs operations.
const (
	ConfigSet      ConfigOpType = 0
	ConfigDelete   ConfigOpType = 1
	ConfigAppend   ConfigOpType = 2
	ConfigSubtract ConfigOpType = 3
)

// ConfigOp is one operation of an incremental alteration: SET Key to
// Value, DELETE Key (the topic falls back to the default), or APPEND or
// SUBTRACT Value's comma-separated items to or from list config Key.
// Value is nil only where Kafka's request had a null.
type ConfigOp struct {
	Key   string
	Op    ConfigOpType
	Value *string
}

// AlterTopicConfigs applies ops to configs, a topic's settings (modified
// and returned), and validates the result for replication factor rf
// (ParseTopicConfig). The rules are Kafka's (ConfigAdminManager):
//
//   - every key is a topic config (INVALID_CONFIG otherwise, DELETE
//     included) and is named once (INVALID_REQUEST);
//   - SET needs a value (INVALID_REQUEST for a null);
//   - APPEND and SUBTRACT only apply to list configs (cleanup.policy:
//     INVALID_CONFIG otherwise); they work on the topic's setting, or the
//     default when it has none, add the items not there yet or remove
//     those there, and keep the list's order;
//   - an operation of another number is INVALID_REQUEST;
//   - the result must be a valid set of configs (INVALID_CONFIG naming
//     the key).
//
// min.insync.replicas deleted is not filled in here: the controller
// gives the topic the cluster default (controller.TopicDefaults).
func AlterTopicConfigs(configs map[string]string, ops []ConfigOp, rf int32) (map[string]string, error) {
	defs := defaultTopicConfig()
	seen := map[string]bool{}
	for _, op := range ops {
		if _, ok := defs[op.Key]; !ok {
			return nil, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "unknown topic config %q", errs.Echo(op.Key))
		}
		if seen[op.Key] {
			return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "config %q is altered twice in one request", op.Key)
		}
		seen[op.Key] = true
		if op.Value == nil && op.Op != ConfigDelete {
			return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "config %q: a null value is only allowed with DELETE", op.Key)
		}
		switch op.Op {
		case ConfigSet:
			configs[op.Key] = *op.Value
		case ConfigDelete:
			delete(configs, op.Key)
		case ConfigAppend, ConfigSubtract:
			if topicConfigDef(op.Key).Type != ConfigTypeList {
				return nil, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "config %q is not a list: only SET and DELETE apply to it", op.Key)
			}
			cur, ok := configs[op.Key]
			if !ok {
				cur = defs[op.Key]
			}
			list := splitList(cur)
			for _, item := range splitList(*op.Value) {
				i := slices.Index(list, item)
				switch {
				case op.Op == ConfigAppend && i < 0:
					list = append(list, item)
				case op.Op == ConfigSubtract && i >= 0:
					list = slices.Delete(list, i, i+1)
				}
			}
			configs[op.Key] = strings.Join(list, ",")
		default:
			return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "config %q: unknown operation %d (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)", op.Key, op.Op)
		}
	}
	if _, err := ParseTopicConfig(configs, rf); err != nil {
		return nil, err
	}
	return configs, nil
}

// ReplaceTopicConfigs is the edit of Kafka's legacy AlterConfigs: the
// topic's settings become configs (validated for replication factor rf
// as AlterTopicConfigs validates), whatever they were. As there,
// min.insync.replicas left out gets the cluster default.
func ReplaceTopicConfigs(configs map[string]string, rf int32) (map[string]string, error) {
	defs := defaultTopicConfig()
	for k := range configs {
		if _, ok := defs[k]; !ok {
			return nil, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "unknown topic config %q", errs.Echo(k))
		}
	}
	if _, err := ParseTopicConfig(configs, rf); err != nil {
		return nil, err
	}
	return configs, nil
}

// splitList splits a list config's value at commas, trimmed, without
// empty items.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
