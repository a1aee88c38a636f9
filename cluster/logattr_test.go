package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// Issue 18: a partition's log lines carry topic and partition as keys of
// their own (filterable in JSON and text logs), not "t-0".
func TestPartitionLogKeys(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("became leader", TopicPartition{"orders", 7}.LogAttr(), "leader_epoch", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line["topic"] != "orders" || line["partition"] != 7.0 || line["leader_epoch"] != 3.0 {
		t.Errorf("JSON log line %s, want topic, partition and leader_epoch keys", buf.String())
	}
	buf.Reset()
	slog.New(slog.NewTextHandler(&buf, nil)).Info("became leader", TopicPartition{"orders", 7}.LogAttr())
	if !strings.Contains(buf.String(), " topic=orders partition=7") {
		t.Errorf("text log line %q, want topic=orders partition=7", buf.String())
	}
}
