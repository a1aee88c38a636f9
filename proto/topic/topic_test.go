package topic_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/topic"
)

// A partition prints as Kafka prints it: "topic-partition", the topic
// kept whole even when it contains dashes or digits itself.
func TestPartitionStringIsTopicDashPartition(t *testing.T) {
	for _, c := range []struct {
		tp   topic.Partition
		want string
	}{
		{topic.Partition{Topic: "orders", Partition: 3}, "orders-3"},
		{topic.Partition{Topic: "a-1", Partition: 0}, "a-1-0"},
		{topic.Partition{Topic: "__consumer_offsets", Partition: 49}, "__consumer_offsets-49"},
		{topic.Partition{}, "-0"},
	} {
		if got := c.tp.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.tp, got, c.want)
		}
	}
}

// Issue 18: a partition's log lines carry topic and partition as keys of
// their own (filterable in JSON and text logs), not "t-0".
func TestPartitionLogAttrInlinesTopicAndPartition(t *testing.T) {
	var buf bytes.Buffer
	tp := topic.Partition{Topic: "orders", Partition: 7}
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("became leader", tp.LogAttr(), "leader_epoch", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line["topic"] != "orders" || line["partition"] != 7.0 || line["leader_epoch"] != 3.0 {
		t.Errorf("JSON log line %s, want topic, partition and leader_epoch keys", buf.String())
	}
	buf.Reset()
	slog.New(slog.NewTextHandler(&buf, nil)).Info("became leader", tp.LogAttr())
	if !strings.Contains(buf.String(), " topic=orders partition=7") {
		t.Errorf("text log line %q, want topic=orders partition=7", buf.String())
	}
}

// Partition is a map key: two values naming the same partition are equal.
func TestPartitionIsComparable(t *testing.T) {
	m := map[topic.Partition]int{{Topic: "t", Partition: 1}: 1}
	if m[topic.Partition{Topic: "t", Partition: 1}] != 1 || len(m) != 1 {
		t.Errorf("map lookup by an equal Partition failed: %v", m)
	}
}
