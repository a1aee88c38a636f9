package cluster

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// max.message.bytes bounds the batch as stored, not only as sent: a simple
// batch (decision 43) of empty records within the limit, which would grow
// past it once its offset deltas are filled, is refused with
// MESSAGE_TOO_LARGE naming the topic, and nothing is stored (issue 29).
func TestAppendRefusesSimpleBatchGrowingPastMaxMessageBytes(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 1)
	b := newImage(t, "c1").apply(createTopic("s", "id-s", []int32{1}))
	b.apply(controller.ConfigChange{Topic: "s", Key: "max.message.bytes", Value: "1048576"})
	applyImage(t, m, b.snapshot(), now)

	// proto.Marshal's layout of a simple batch: base_timestamp, then
	// 2-byte empty records, 900 KiB in all (each becomes 7 or 8 bytes).
	raw := protowire.AppendTag(nil, 6, protowire.Fixed64Type)
	raw = protowire.AppendFixed64(raw, 1000)
	for len(raw) < 900<<10 {
		raw = append(raw, 0x62, 0)
	}
	_, err := m.Append("s", 0, raw, now)
	wantCode(t, "simple batch growing past max.message.bytes", err, sluicev1.ErrorCode_MESSAGE_TOO_LARGE)
	if !strings.Contains(err.Error(), `topic "s"`) || !strings.Contains(err.Error(), "1048576") {
		t.Errorf("error %q does not name the topic and its limit", err)
	}
	if p, _ := m.Replica("s", 0); p.LogEndOffset() != 0 {
		t.Fatalf("a refused batch was stored (log end %d)", p.LogEndOffset())
	}
	// A batch within the limit once canonical still goes in.
	if _, err := m.Append("s", 0, plainBatch(3), now); err != nil {
		t.Fatal(err)
	}
}
