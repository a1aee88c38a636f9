// Package codec is the gRPC codec Sluice's servers, inter-node connections
// and clients use. On the wire it is gRPC's protobuf codec ("proto"); it
// differs in how it handles memory on the replication and produce paths
// (DESIGN §4, docs/benchmarks.md):
//
//   - buffers come from Pool, which does not zero them;
//   - a ReplicaFetchResponse is encoded without copying its batches: the
//     encoding is a mem.BufferSlice whose batch pieces are the batches
//     themselves (read from the segments), so gRPC copies each batch once,
//     into its write buffer;
//   - a message implementing AliasUnmarshaler (ProduceRequest,
//     ReplicaFetchResponse) decodes its batches as slices of the received
//     buffer instead of copies, and gives the buffer back with Release.
//
// Every other message goes through proto.Marshal and proto.Unmarshal as
// with gRPC's own codec.
package codec

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// Name is the codec's name: gRPC's protobuf codec's, since the encoding is
// the same.
const Name = "proto"

// Codec implements encoding.CodecV2 (see the package comment). The zero
// value uses DefaultPool.
type Codec struct {
	// Pool supplies marshal and materialize buffers; nil is DefaultPool.
	Pool mem.BufferPool
}

var _ encoding.CodecV2 = Codec{}

// AliasUnmarshaler is a message that decodes itself from buf, keeping
// slices of it instead of copying (batches). It takes over the caller's
// reference to buf, which it frees when released.
type AliasUnmarshaler interface {
	UnmarshalAliased(buf mem.Buffer) error
}

func (c Codec) pool() mem.BufferPool {
	if c.Pool == nil {
		return DefaultPool
	}
	return c.Pool
}

// Marshal encodes v.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *internalv1.ReplicaFetchResponse:
		return marshalReplicaFetchResponse(m, nil), nil
	case *ReplicaFetchResponse:
		return marshalReplicaFetchResponse(&m.ReplicaFetchResponse, nil), nil
	case *OutgoingProduceStreamRequest:
		return marshalProduceStreamRequest(m.ProduceStreamRequestView, m.Buffers), nil
	case *OutgoingFetchResponse:
		out, err := marshalFetchResponse(m.FetchResponseView, m.Buffers)
		m.Buffers.Free()
		return out, err
	case *OutgoingReplicaFetchResponse:
		return marshalReplicaFetchResponse(m.ReplicaFetchResponse, m.Buffers), nil
	}
	vv := messageOf(v)
	if vv == nil {
		return nil, fmt.Errorf("codec: cannot marshal %T: not a proto.Message", v)
	}
	size := proto.Size(vv)
	// UseCachedSize reuses what Size just computed (as gRPC's codec does);
	// the message must not change meanwhile.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(vv)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := c.pool()
	bp := pool.Get(size)
	b, err := opts.MarshalAppend((*bp)[:0], vv)
	if err != nil {
		pool.Put(bp)
		return nil, err
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// Unmarshal decodes data into v. An AliasUnmarshaler keeps a reference to
// the bytes; every other message copies what it keeps. When the bytes are
// not a valid encoding of v and a Server is receiving into v, the error is
// handed to the Server (which answers InvalidArgument) and Unmarshal
// reports success to gRPC, which would otherwise answer Internal at once.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(c.pool())
	if a, ok := v.(AliasUnmarshaler); ok {
		return undecodable(v, a.UnmarshalAliased(buf)) // buf is a's now
	}
	defer buf.Free()
	vv := messageOf(v)
	if vv == nil {
		return fmt.Errorf("codec: cannot unmarshal into %T: not a proto.Message", v)
	}
	return undecodable(v, proto.Unmarshal(buf.ReadOnlyData(), vv))
}

// Name returns Name.
func (Codec) Name() string { return Name }

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

// ServerOptions are the gRPC server options that make a server use Codec
// and DefaultPool.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(Codec{}), experimental.BufferPool(DefaultPool)}
}

// DialOptions are the gRPC dial options that make a client connection use
// Codec and DefaultPool.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{})), experimental.WithBufferPool(DefaultPool)}
}
