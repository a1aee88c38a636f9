package kafka_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReadyAnswerIsNotHeldBehindALongPoll: on one connection (as
// librdkafka uses one per broker), a Metadata request followed by a Fetch
// that long-polls for 10 s gets its answer while the fetch still waits —
// answers before a waiting one are flushed first.
func TestReadyAnswerIsNotHeldBehindALongPoll(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 30*time.Second)
	if _, err := kadm.NewClient(newClient(t, s.Node.KafkaAddr())).CreateTopic(ctx, 1, 1, nil, "idle"); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", s.Node.KafkaAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := func(req kmsg.Request, id int32) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
		b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
		b = binary.BigEndian.AppendUint32(b, uint32(id))
		b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
		b = req.AppendTo(b)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 7
	f := kmsg.NewPtrFetchRequest()
	f.Version, f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 11, 10000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "idle"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = []kmsg.FetchRequestTopicPartition{fp}
	f.Topics = []kmsg.FetchRequestTopic{ft}
	if _, err := c.Write(append(frame(md, 1), frame(f, 2)...)); err != nil {
		t.Fatal(err)
	}
	// The fetch waits 10 s for data that does not come; the Metadata
	// answer must come well before.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("the Metadata answer did not come while the fetch long-polled: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if id := int32(binary.BigEndian.Uint32(body)); id != 1 {
		t.Fatalf("first answer is for request %d", id)
	}
}
