package codec

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers gRPC's own codec, the baseline
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// A replica fetch response as a leader sends it under load: 4 partitions
// with 4 batches of 64 KiB each (1 MiB in all).
func benchFetchResponse() *internalv1.ReplicaFetchResponse {
	m := &internalv1.ReplicaFetchResponse{}
	for p := range 4 {
		d := &internalv1.ReplicaFetchPartitionData{Topic: "bench", Partition: int32(p), HighWatermark: 1 << 20, LogEndOffset: 1<<20 + 100}
		for range 4 {
			d.Batches = append(d.Batches, bytes.Repeat([]byte{byte(p)}, 64<<10))
		}
		m.Partitions = append(m.Partitions, d)
	}
	return m
}

// frames cuts wire into 16 KiB pieces from pool, as gRPC's transport
// hands a received message to the codec.
func frames(wire []byte, pool mem.BufferPool) mem.BufferSlice {
	var s mem.BufferSlice
	for i := 0; i < len(wire); i += 16 << 10 {
		s = append(s, mem.Copy(wire[i:min(i+16<<10, len(wire))], pool))
	}
	return s
}

func benchmarkMarshal(b *testing.B, c encoding.CodecV2, m any) {
	size := proto.Size(m.(proto.Message))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		data, err := c.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		// gRPC copies the encoding into its write buffer.
		var sink [32 << 10]byte
		r := data.Reader()
		for {
			if n, _ := r.Read(sink[:]); n == 0 {
				break
			}
		}
		r.Close()
		data.Free()
	}
}

// Leader side: encoding a replica fetch response and reading it out.
func BenchmarkReplicaFetchResponseMarshal(b *testing.B) {
	m := benchFetchResponse()
	b.Run("grpc-proto", func(b *testing.B) { benchmarkMarshal(b, encoding.GetCodecV2("proto"), m) })
	b.Run("sluice", func(b *testing.B) { benchmarkMarshal(b, Codec{}, m) })
}

func benchmarkUnmarshal(b *testing.B, c encoding.CodecV2, pool mem.BufferPool, wire []byte, newMsg func() any) {
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		data := frames(wire, pool)
		m := newMsg()
		if err := c.Unmarshal(data, m); err != nil {
			b.Fatal(err)
		}
		data.Free()
		if r, ok := m.(interface{ Release() }); ok {
			r.Release()
		}
	}
}

// Follower side: a replica fetch response from 16 KiB frames to batches.
func BenchmarkReplicaFetchResponseUnmarshal(b *testing.B) {
	wire, err := proto.Marshal(benchFetchResponse())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("grpc-proto", func(b *testing.B) {
		benchmarkUnmarshal(b, encoding.GetCodecV2("proto"), mem.DefaultBufferPool(), wire, func() any { return &internalv1.ReplicaFetchResponse{} })
	})
	b.Run("sluice", func(b *testing.B) {
		benchmarkUnmarshal(b, Codec{}, DefaultPool, wire, func() any { return &ReplicaFetchResponse{} })
	})
}

// Leader side: a 1 MiB produce request from 16 KiB frames to batches.
func BenchmarkProduceRequestUnmarshal(b *testing.B) {
	m := &internalv1.ProduceRequestView{Topics: []*internalv1.TopicProduceDataView{{Name: "bench"}}}
	for p := range 4 {
		m.Topics[0].Partitions = append(m.Topics[0].Partitions, &internalv1.PartitionProduceDataView{Partition: int32(p), Batch: bytes.Repeat([]byte{1}, 256<<10)})
	}
	wire, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("grpc-proto", func(b *testing.B) {
		benchmarkUnmarshal(b, encoding.GetCodecV2("proto"), mem.DefaultBufferPool(), wire, func() any { return &internalv1.ProduceRequestView{} })
	})
	b.Run("sluice", func(b *testing.B) {
		benchmarkUnmarshal(b, Codec{}, DefaultPool, wire, func() any { return &ProduceRequest{} })
	})
}
