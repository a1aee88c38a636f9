package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// startBare starts a Server with no backends on a loopback port: enough
// for framing and ApiVersions.
func startBare(t *testing.T, cfg Config) string {
	t.Helper()
	_, addr := startServer(t, cfg)
	return addr
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// frame is a request frame: header v1 (v2 when req is flexible) and body.
func frame(req kmsg.Request, correlationID int32) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(correlationID))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// readAnswer reads one response frame: its correlation id and body.
func readAnswer(t *testing.T, c net.Conn) (int32, []byte) {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return int32(binary.BigEndian.Uint32(b)), b[4:]
}

// expectClosed checks the server closes c without answering.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	n, err := c.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("connection not closed: read %d bytes, %v", n, err)
	}
}

func TestApiVersionsListsTheHandlers(t *testing.T) {
	addr := startBare(t, Config{})
	c := dial(t, addr)
	// Pipelined: three requests before reading, answered in order.
	var out []byte
	for id := int32(1); id <= 3; id++ {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
		out = append(out, frame(req, id)...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	for id := int32(1); id <= 3; id++ {
		got, body := readAnswer(t, c)
		if got != id {
			t.Fatalf("answer %d has correlation id %d", id, got)
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 3
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		if len(resp.FinalizedFeatures) != len(features) || resp.FinalizedFeatures[1].Name != "transaction.version" || resp.FinalizedFeatures[1].MaxVersionLevel != 2 ||
			resp.FinalizedFeatures[0].Name != "group.version" || resp.FinalizedFeatures[0].MaxVersionLevel != 1 {
			t.Fatalf("finalized features %+v: want group.version 1 and transaction.version 2", resp.FinalizedFeatures)
		}
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(handlers) {
			t.Fatalf("error %d, %d keys for %d handlers", resp.ErrorCode, len(resp.ApiKeys), len(handlers))
		}
		for _, k := range resp.ApiKeys {
			h, ok := handlers[k.ApiKey]
			if !ok || h.listedMin() != k.MinVersion || h.max != k.MaxVersion {
				t.Fatalf("listed %s %d-%d, served %v", kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion, h)
			}
			req := kmsg.RequestForKey(k.ApiKey)
			if req == nil || k.MaxVersion > req.MaxVersion() {
				t.Fatalf("%s: version %d is past what kmsg knows", kmsg.NameForKey(k.ApiKey), k.MaxVersion)
			}
		}
	}
}

func TestApiVersionsOfAnUnknownVersionAnswersV0(t *testing.T) {
	addr := startBare(t, Config{})
	c := dial(t, addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 4
	f := frame(req, 7)
	binary.BigEndian.PutUint16(f[6:], 99) // version 99, body of v4
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	id, body := readAnswer(t, c)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if id != 7 || resp.ErrorCode != codeUnsupportedVersion || len(resp.ApiKeys) == 0 {
		t.Fatalf("id %d, error %d, %d keys", id, resp.ErrorCode, len(resp.ApiKeys))
	}
}

// TestBadFramesCloseTheConnection: an unknown API key, a version not
// served, a frame larger than socket.request.max.bytes, a body that does
// not parse — each closes the connection, as Kafka does; the server goes
// on serving others.
func TestBadFramesCloseTheConnection(t *testing.T) {
	addr := startBare(t, Config{MaxRequestSize: 1 << 20})
	good := func() []byte {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		return frame(req, 1)
	}
	unknownKey := good()
	binary.BigEndian.PutUint16(unknownKey[4:], 9999)
	metadataV1 := kmsg.NewPtrMetadataRequest()
	metadataV1.Version = 1
	metadataV1.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
	truncated := frame(metadataV1, 1)
	truncated = truncated[:len(truncated)-2]
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4))
	produceV13 := kmsg.NewPtrProduceRequest()
	produceV13.Version = 13 // topic ids: not served
	huge := binary.BigEndian.AppendUint32(nil, 2<<20)
	for name, f := range map[string][]byte{
		"unknown API key":    unknownKey,
		"truncated body":     truncated,
		"unserved version":   frame(produceV13, 1),
		"too large":          huge,
		"negative size":      binary.BigEndian.AppendUint32(nil, 0xffffff00),
		"header too short":   {0, 0, 0, 3, 0, 18, 0},
		"client id too long": append(binary.BigEndian.AppendUint32(nil, 10), 0, 18, 0, 1, 0, 0, 0, 1, 0x7f, 0),
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := c.Write(f); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, c)
			// The server still serves.
			c2 := dial(t, addr)
			if _, err := c2.Write(good()); err != nil {
				t.Fatal(err)
			}
			if id, body := readAnswer(t, c2); id != 1 || len(body) == 0 {
				t.Fatalf("after %s: answer %d", name, id)
			}
		})
	}
}

// FuzzRequestFrame: no request frame crashes the parser.
func FuzzRequestFrame(f *testing.F) {
	for _, req := range []kmsg.Request{kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrProduceRequest(), kmsg.NewPtrFetchRequest()} {
		for v := int16(0); v <= req.MaxVersion(); v += 3 {
			req.SetVersion(v)
			f.Add(frame(req, 1)[4:])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRequest(bytes.Clone(b))
		if err == nil && r.msg == nil {
			t.Fatal("parsed without a message")
		}
	})
}

// TestOldProduceIsListedButRefused: Produce v0-2 is in the ApiVersions
// list (librdkafka compresses only when it sees v0 there, as against
// Kafka 4) and each partition of such a request answers
// UNSUPPORTED_VERSION; acks=0 gets no answer.
func TestOldProduceIsListedButRefused(t *testing.T) {
	addr := startBare(t, Config{})
	c := dial(t, addr)
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks = 2, 1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "t"
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: []byte{1, 2, 3}}, {Partition: 1}}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	quiet := *req
	quiet.Acks = 0
	if _, err := c.Write(append(frame(&quiet, 1), frame(req, 2)...)); err != nil {
		t.Fatal(err)
	}
	id, body := readAnswer(t, c) // the acks=0 request is not answered
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 2
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if id != 2 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		t.Fatalf("answer %d: %+v", id, resp)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != codeUnsupportedVersion || p.BaseOffset != -1 {
			t.Fatalf("partition %d: error %d, offset %d", p.Partition, p.ErrorCode, p.BaseOffset)
		}
	}
}
