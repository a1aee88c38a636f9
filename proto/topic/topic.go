// Package topic holds the one name of a partition that every layer
// shares: storage, cluster, the coordinators, the doors and the public
// client all say topic.Partition, so a partition passes between them as
// it is, without conversions between look-alike structs.
//
// It lives at the bottom layer (proto) because dependencies point one way
// (proto ← storage ← cluster, coordinator ← api ← node ← cmd) and every
// one of those layers, and the public client, may import proto; it
// imports nothing of Sluice itself.
package topic

import (
	"log/slog"
	"strconv"
)

// Partition names one partition of a topic. Comparable, so it serves as a
// map key; the zero value names no partition.
type Partition struct {
	Topic     string
	Partition int32
}

// String is "topic-partition", e.g. "orders-3", as Kafka prints a
// partition.
func (tp Partition) String() string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// LogAttr is the partition as log keys: topic and partition, inlined (a
// group with an empty key), so that logs can be filtered on either.
func (tp Partition) LogAttr() slog.Attr {
	return slog.Group("", slog.String("topic", tp.Topic), slog.Int("partition", int(tp.Partition)))
}
