package codec

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is a gRPC server using Codec (ServerOptions) whose services are
// registered through it, so that a request whose bytes do not decode is
// answered InvalidArgument — the client sent something invalid — instead
// of grpc-go's Internal (issue 29).
//
// grpc-go turns any codec error into an Internal status and writes it to
// the stream at once, inside RecvMsg, before any interceptor or handler
// can change it. So each method registered through Server receives its
// requests with the message marked as pending (receiving); Codec.Unmarshal,
// finding the bytes undecodable for a pending message, keeps the error
// there and reports success to gRPC, and the method's decode function (a
// unary handler's) or RecvMsg (a stream's) returns InvalidArgument with
// it. The handler never sees the message. Every other method of the
// embedded *grpc.Server is its own.
type Server struct {
	*grpc.Server
}

// RegisterService registers impl under a copy of desc whose handlers
// receive their requests through receive.
func (s Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	RegisterHooked(s.Server, desc, impl, ReceiveHook{
		Unary: func(_ context.Context, dec func(any) error) (func(any) error, func()) {
			return func(v any) error { return receive(v, dec) }, nil
		},
		Stream: func(ss grpc.ServerStream, _ bool) (grpc.ServerStream, func()) { return requestStream{ss}, nil },
	})
}

// requestStream is a server stream whose RecvMsg goes through receive.
type requestStream struct {
	grpc.ServerStream
}

func (s requestStream) RecvMsg(m any) error { return receive(m, s.ServerStream.RecvMsg) }

// pending holds the messages a Server method is receiving into, each
// mapped to nil, or to the error of its decoding once Codec.Unmarshal
// found its bytes undecodable. An entry lives for one receive: the
// method's goroutine adds it, Unmarshal runs on that same goroutine
// (inside gRPC's receive), and the goroutine takes it out.
var pending sync.Map // message (a pointer) -> error or nil

// receive calls recv(m) with m pending, and returns InvalidArgument if
// Codec.Unmarshal found m's bytes undecodable, else recv's error.
func receive(m any, recv func(any) error) error {
	pending.Store(m, nil)
	err := recv(m)
	v, _ := pending.LoadAndDelete(m)
	if derr, ok := v.(error); ok && err == nil {
		return status.Error(codes.InvalidArgument, "the request does not decode: "+derr.Error())
	}
	return err
}

// undecodable is Unmarshal's answer for err, the error of decoding into
// v: nil stays nil; for a pending v (a Server receiving into it) the
// error is kept for receive and nil returned; otherwise (a client, or a
// server not registered through Server) the error is returned for gRPC to
// answer.
func undecodable(v any, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := pending.Load(v); ok {
		pending.Store(v, err)
		return nil
	}
	return err
}
