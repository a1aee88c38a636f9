package kafka_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/kafkabatch"
)

// Seeds from real clients' traffic (issue 34: "the frame and batch
// parsers are fuzzed, with seeds from real clients' traffic"): request
// frames that franz-go, kcat and confluent-kafka (librdkafka) sent to a
// node, kept as seed corpus files of FuzzRequestFrame, and the record
// batches of their produce requests as seeds of kafkabatch's
// FuzzFromKafka. testdata/README.md says how they were captured.

const (
	// recordEnv makes TestRealTrafficSeeds record the seeds anew.
	recordEnv = "SLUICE_RECORD_KAFKA_TRAFFIC"
	// realPrefix starts every real-traffic seed file's name.
	realPrefix = "real-"
	// maxSeed bounds one seed file's input.
	maxSeed = 64 << 10
)

// The corpus directories, from this package's directory.
var (
	frameCorpus = filepath.Join("testdata", "fuzz", "FuzzRequestFrame")
	batchCorpus = filepath.Join("..", "proto", "kafkabatch", "testdata", "fuzz", "FuzzFromKafka")
)

// TestRealTrafficSeeds: every committed real-traffic seed is what the
// door takes from a client — each request frame parses as a connection
// parses it (or is an ApiVersions of a newer version, answered as
// KIP-511 asks), under the API and version its name says; each record
// batch converts with FromKafka, compressed with the codec its name
// says — and the set covers each client. With SLUICE_RECORD_KAFKA_TRAFFIC=1
// it first records them anew: a node behind a recording proxy, driven
// by franz-go, and by kcat and confluent-kafka when installed.
func TestRealTrafficSeeds(t *testing.T) {
	if os.Getenv(recordEnv) != "" {
		recordRealTraffic(t)
	}
	frames := readSeeds(t, frameCorpus)
	batches := readSeeds(t, batchCorpus)
	clients := map[string]int{}
	for name, b := range frames {
		if len(b) > maxSeed {
			t.Errorf("%s: %d bytes, more than %d", name, len(b), maxSeed)
		}
		kip511, err := kafka.ParseRequestFrame(bytes.Clone(b))
		if err != nil {
			t.Errorf("%s does not parse: %v", name, err)
			continue
		}
		key, version := int16(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b[2:]))
		if kip511 && key != 18 {
			t.Errorf("%s: KIP-511 answer to API %d", name, key)
		}
		if want := fmt.Sprintf("-%s-v%d", strings.ToLower(kafka.APIName(key)), version); !strings.Contains(name, want) {
			t.Errorf("%s holds %s v%d", name, kafka.APIName(key), version)
		}
		clients[clientOf(name)]++
	}
	for name, b := range batches {
		if len(b) > maxSeed {
			t.Errorf("%s: %d bytes, more than %d", name, len(b), maxSeed)
		}
		_, info, err := kafkabatch.FromKafka(nil, b, kafkabatch.Limits{})
		if err != nil {
			t.Errorf("%s does not convert: %v", name, err)
			continue
		}
		if !strings.HasSuffix(name, "-"+info.Codec.String()) {
			t.Errorf("%s is compressed with %v", name, info.Codec)
		}
	}
	// The recorded set: each client's requests (franz-go alone sends
	// most APIs), its batches of every codec it compressed with.
	for _, c := range []struct {
		client         string
		frames, codecs int
	}{{"franz-go", 15, 5}, {"kcat", 5, 4}, {"confluent-kafka", 6, 4}} {
		if clients[c.client] < c.frames {
			t.Errorf("%d request seeds of %s, want at least %d (record them with %s=1)", clients[c.client], c.client, c.frames, recordEnv)
		}
		n := 0
		for name := range batches {
			if clientOf(name) == c.client {
				n++
			}
		}
		if n < c.codecs {
			t.Errorf("%d batch seeds of %s, want at least %d (record them with %s=1)", n, c.client, c.codecs, recordEnv)
		}
	}
}

// clients are the clients recorded, as seed names spell them.
var clients = []string{"franz-go", "kcat", "confluent-kafka"}

// clientOf is the client of a seed's name.
func clientOf(name string) string {
	for _, c := range clients {
		if strings.HasPrefix(name, realPrefix+c+"-") {
			return c
		}
	}
	return ""
}

// readSeeds reads dir's real-traffic seeds: go test's corpus files of one
// []byte argument.
func readSeeds(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, realPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{}
	for _, p := range paths {
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := decodeSeed(body)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		seeds[filepath.Base(p)] = b
	}
	return seeds
}

// encodeSeed is a go test fuzz corpus file of one []byte argument, as go
// test writes it (and kafkabatch's TestFuzzCorpusIsCurrent).
func encodeSeed(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
}

// decodeSeed reads what encodeSeed writes.
func decodeSeed(body []byte) ([]byte, error) {
	s, ok := strings.CutPrefix(string(body), "go test fuzz v1\n[]byte(")
	if !ok {
		return nil, fmt.Errorf("not a go test fuzz v1 file of one []byte")
	}
	s, ok = strings.CutSuffix(strings.TrimRight(s, "\n"), ")")
	if !ok {
		return nil, fmt.Errorf("not a go test fuzz v1 file of one []byte")
	}
	u, err := strconv.Unquote(s)
	return []byte(u), err
}

// recordingProxy sits between Kafka clients and a broker's Kafka
// listener, copying each request frame as it forwards it; answers pass
// untouched. The broker advertises the proxy's address, so the clients
// bootstrapped on it stay on it.
type recordingProxy struct {
	ln       net.Listener
	upstream string // the broker's listener: set before clients connect
	wg       sync.WaitGroup

	mu     sync.Mutex // guards the following
	client string     // whose requests arrive now
	frames []recordedFrame
	conns  map[net.Conn]struct{}
}

// recordedFrame is a request frame, without its size.
type recordedFrame struct {
	client string
	body   []byte
}

func startRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *recordingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(c, up)
			c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.forward(c, up)
			up.Close()
		}()
	}
}

// forward copies request frames from c to up, recording each.
func (p *recordingProxy) forward(c, up net.Conn) {
	br := bufio.NewReader(c)
	var size [4]byte
	for {
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 100<<20 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		p.mu.Lock()
		p.frames = append(p.frames, recordedFrame{client: p.client, body: body})
		p.mu.Unlock()
		if _, err := up.Write(append(size[:], body...)); err != nil {
			return
		}
	}
}

// as records what arrives from now on as client's.
func (p *recordingProxy) as(client string) {
	p.mu.Lock()
	p.client = client
	p.mu.Unlock()
}

func (p *recordingProxy) recorded() []recordedFrame {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]recordedFrame(nil), p.frames...)
}

func (p *recordingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// recordRealTraffic drives a node through a recording proxy with each
// client installed and rewrites the seeds of each client that ran.
func recordRealTraffic(t *testing.T) {
	p := startRecordingProxy(t)
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) {
		c.KafkaListen, c.KafkaAdvertise = "127.0.0.1:0", p.ln.Addr().String()
	})
	p.upstream = s.Node.KafkaAddr()
	addr := p.ln.Addr().String()
	// A SCRAM user, for the clients' SASL exchanges (offered on a
	// plaintext listener too).
	admin, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		if err := admin.UpsertScramUser(ctx, trafficUser, m, trafficPassword, 0); err != nil {
			t.Fatal(err)
		}
	}
	var ran []string
	for _, c := range []struct {
		client string
		topic  string // created first, unrecorded (kcat cannot)
		run    func(t *testing.T, addr string) error
	}{{"franz-go", "", franzGoTraffic}, {"kcat", kcatTopic, kcatTraffic}, {"confluent-kafka", "", confluentKafkaTraffic}} {
		p.as("")
		if c.topic != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := createTopic(ctx, addr, c.topic, 2)
			cancel()
			if err != nil {
				t.Fatalf("create %s: %v", c.topic, err)
			}
		}
		p.as(c.client)
		err := c.run(t, addr)
		p.as("")
		if err != nil {
			if c.client == "franz-go" {
				t.Fatalf("franz-go: %v", err)
			}
			t.Logf("%s not recorded: %v", c.client, err)
			continue
		}
		ran = append(ran, c.client)
	}
	frames, batches := selectSeeds(t, p.recorded())
	for _, c := range ran {
		writeSeeds(t, frameCorpus, c, frames)
		writeSeeds(t, batchCorpus, c, batches)
	}
}

// variants is how many request frames of one client, API, version (and
// codec) selectSeeds keeps: the first ones of different sizes (a size
// apart is most often another shape: more topics, an offset by time, a
// SASL message of the next step).
const variants = 3

// selectSeeds keeps the first request frames of each client, API,
// version (and, for Produce, codec) under maxSeed, up to variants of
// different sizes (named ...-2, ...-3 after the first), and the first
// record batch of each client and codec.
func selectSeeds(t *testing.T, frames []recordedFrame) (requests, batches map[string][]byte) {
	requests, batches = map[string][]byte{}, map[string][]byte{}
	sizes := map[string][]int{}
	for _, f := range frames {
		if len(f.body) < 8 || len(f.body) > maxSeed || f.client == "" {
			continue
		}
		key, version := int16(binary.BigEndian.Uint16(f.body)), int16(binary.BigEndian.Uint16(f.body[2:]))
		if _, err := kafka.ParseRequestFrame(bytes.Clone(f.body)); err != nil {
			t.Logf("%s sent a %s v%d the door refuses: %v", f.client, kafka.APIName(key), version, err)
			continue
		}
		name := fmt.Sprintf("%s%s-%s-v%d", realPrefix, f.client, strings.ToLower(kafka.APIName(key)), version)
		if key == 0 {
			recs := produceBatches(f.body)
			if len(recs) == 0 {
				continue
			}
			for _, b := range recs {
				h, err := kafkabatch.ParseHeader(b)
				if err != nil || len(b) > maxSeed {
					continue
				}
				bn := fmt.Sprintf("%s%s-%s", realPrefix, f.client, h.Codec())
				if _, ok := batches[bn]; !ok {
					batches[bn] = b
				}
			}
			h, _ := kafkabatch.ParseHeader(recs[0])
			name += "-" + h.Codec().String()
		}
		if len(sizes[name]) >= variants || slices.Contains(sizes[name], len(f.body)) {
			continue
		}
		sizes[name] = append(sizes[name], len(f.body))
		if n := len(sizes[name]); n > 1 {
			name += "-" + strconv.Itoa(n)
		}
		requests[name] = f.body
	}
	return requests, batches
}

// produceBatches is the record batches of a Produce request frame.
func produceBatches(frame []byte) [][]byte {
	key, version := int16(binary.BigEndian.Uint16(frame)), int16(binary.BigEndian.Uint16(frame[2:]))
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	b := frame[8:]
	l := int(int16(binary.BigEndian.Uint16(b)))
	b = b[2+max(l, 0):]
	if req.IsFlexible() {
		b = b[1:] // the request header's tagged fields: franz-go and librdkafka send none
	}
	if err := req.ReadFrom(b); err != nil {
		return nil
	}
	var out [][]byte
	for _, t := range req.(*kmsg.ProduceRequest).Topics {
		for _, p := range t.Partitions {
			for b, err := range kafkabatch.Batches(p.Records) {
				if err != nil {
					break
				}
				out = append(out, b)
			}
		}
	}
	return out
}

// writeSeeds replaces client's real-traffic seeds in dir with client's of
// seeds.
func writeSeeds(t *testing.T, dir, client string, seeds map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, realPrefix+client+"-*"))
	for _, p := range old {
		if clientOf(filepath.Base(p)) == client {
			os.Remove(p)
		}
	}
	var names []string
	for name, b := range seeds {
		if clientOf(name) != client {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), encodeSeed(b), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("%s: %d seeds of %s: %s", dir, len(names), client, strings.Join(names, " "))
}

// codecs are the compression codecs each client produces with.
var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// franzGoTraffic: every API the door serves but SASL's — topics created,
// configs described and altered (incrementally and whole), partitions
// added, produce with each codec (idempotent), consume from the start,
// offsets listed (start, end, by time), leader epochs, producers,
// the cluster described, the topic deleted.
func franzGoTraffic(t *testing.T, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "traffic-franz-go"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	retention := "3600000"
	if res, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": &retention}, topic); err != nil || res[topic].Err != nil {
		return fmt.Errorf("create topic: %v %v", err, res[topic].Err)
	}
	if _, err := adm.DescribeTopicConfigs(ctx, topic); err != nil {
		return err
	}
	if _, err := adm.DescribeBrokerConfigs(ctx, 1); err != nil {
		return err
	}
	segment := "1048576"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.bytes", Value: &segment}}, topic); err != nil {
		return err
	}
	if _, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &retention}}, topic); err != nil {
		return err
	}
	if _, err := adm.CreatePartitions(ctx, 1, topic); err != nil {
		return err
	}
	compression := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	start := time.Now()
	produced := 0
	for i, codec := range codecs {
		prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(compression[codec]),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(20*time.Second))
		if err != nil {
			return err
		}
		recs := trafficRecords(codec)
		for _, r := range recs {
			r.Partition = int32(i % 3)
		}
		err = prod.ProduceSync(ctx, recs...).FirstErr()
		prod.Close()
		if err != nil {
			return fmt.Errorf("produce %s: %w", codec, err)
		}
		produced += len(recs)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cons.Close()
	for got := 0; got < produced; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		got += fs.NumRecords()
	}
	if _, err := adm.ListStartOffsets(ctx, topic); err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	if _, err := adm.ListOffsetsAfterMilli(ctx, start.UnixMilli(), topic); err != nil {
		return err
	}
	var epochs kadm.OffsetForLeaderEpochRequest
	set := kadm.TopicsSet{}
	ends.Each(func(o kadm.ListedOffset) {
		epochs.Add(o.Topic, o.Partition, max(o.LeaderEpoch, 0))
		set.Add(o.Topic, o.Partition)
	})
	if _, err := adm.OffsetForLeaderEpoch(ctx, epochs); err != nil {
		return err
	}
	if _, err := adm.DescribeProducers(ctx, set); err != nil {
		return err
	}
	if _, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl); err != nil {
		return err
	}
	if _, err := adm.Metadata(ctx, topic); err != nil {
		return err
	}
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		return err
	}
	// SaslHandshake and SaslAuthenticate: a SCRAM login of each
	// mechanism (retried until the user has reached the broker's
	// metadata).
	for _, m := range []sasl.Mechanism{scram.Auth{User: trafficUser, Pass: trafficPassword}.AsSha256Mechanism(),
		scram.Auth{User: trafficUser, Pass: trafficPassword}.AsSha512Mechanism()} {
		wait.For(t, 20*time.Second, m.Name()+" login", func() error {
			sc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(m))
			if err != nil {
				return err
			}
			defer sc.Close()
			return sc.Ping(ctx)
		})
	}
	return nil
}

// The SCRAM user the clients log in as.
const trafficUser, trafficPassword = "traffic", "traffic-pw"

// trafficRecords are a few records of every shape: keys, a null key, a
// null and an empty value, binary bytes, headers (a repeated key, an
// empty and a null value).
func trafficRecords(codec string) []*kgo.Record {
	var recs []*kgo.Record
	for i := range 6 {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("%s-key-%d", codec, i)), Value: []byte(strings.Repeat(codec+" sluice ", 10)),
			Headers: []kgo.RecordHeader{{Key: "codec", Value: []byte(codec)}, {Key: "i", Value: []byte{byte(i), 0xff}}, {Key: "i", Value: []byte{}}, {Key: "null"}}}
		switch i {
		case 1:
			r.Key = nil
		case 2:
			r.Value = nil
		case 3:
			r.Value = []byte{}
		case 4:
			r.Value = []byte{0, 1, 2, 0xfe, 0xff}
		}
		recs = append(recs, r)
	}
	return recs
}

// kcatTopic is kcat's topic, with 2 partitions.
const kcatTopic = "traffic-kcat"

// kcatTraffic: kcat (librdkafka) lists the metadata, produces with each
// codec (idempotent, keys, null keys and values, headers), consumes to
// the end and looks an offset up by time.
func kcatTraffic(t *testing.T, addr string) error {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		return fmt.Errorf("kcat not installed (Debian's kcat): %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = kcatTopic
	run := func(stdin string, args ...string) error {
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", addr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kcat %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("", "-L"); err != nil {
		return err
	}
	// A SCRAM login. librdkafka 2.0.2 turns SASL handshakes on only when
	// ApiVersions lists SaslHandshake v0, which the door does not: it
	// refuses to try ("SASL Handshake not supported by broker"), and
	// only its ApiVersions is recorded until the door lists v0.
	if err := run("", "-L", "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
		"-X", "sasl.username="+trafficUser, "-X", "sasl.password="+trafficPassword); err != nil {
		t.Logf("kcat's SCRAM login failed: %v", err)
	}
	start := time.Now()
	for i, codec := range codecs {
		var in strings.Builder
		fmt.Fprintf(&in, "%s-nokey %s\n", codec, strings.Repeat("sluice ", 10))
		fmt.Fprintf(&in, "%s-key-1:\n", codec)
		for j := 2; j < 6; j++ {
			fmt.Fprintf(&in, "%s-key-%d:%s-%d %s\n", codec, j, codec, j, strings.Repeat("sluice ", 10))
		}
		if err := run(in.String(), "-P", "-t", topic, "-p", strconv.Itoa(i%2), "-K:", "-Z", "-z", codec,
			"-H", "codec="+codec, "-H", "empty=", "-H", "null", "-X", "enable.idempotence=true", "-X", "linger.ms=50"); err != nil {
			return err
		}
	}
	if err := run("", "-C", "-t", topic, "-o", "beginning", "-e", "-q"); err != nil {
		return err
	}
	return run("", "-Q", "-t", fmt.Sprintf("%s:0:%d", topic, start.UnixMilli()))
}

// confluentKafkaTraffic runs examples/kafka/python/kafka_example.py
// (confluent-kafka, librdkafka): CreateTopics, Metadata, an idempotent
// produce with each compression.type, a consumer with assign(),
// watermarks (ListOffsets), DeleteTopics.
func confluentKafkaTraffic(t *testing.T, addr string) error {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import confluent_kafka").Run(); err != nil {
		return fmt.Errorf("%s cannot import confluent_kafka (Debian's python3-confluent-kafka): %w", python, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, filepath.Join("..", "examples", "kafka", "python", "kafka_example.py"),
		"--bootstrap", addr, "--topic", "traffic-confluent-kafka", "--records", "6").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka_example.py: %v: %s", err, out)
	}
	return nil
}

// createTopic creates topic with franz-go (kcat cannot).
func createTopic(ctx context.Context, addr, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = res[topic].Err
	}
	return err
}
