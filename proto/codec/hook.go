package codec

import (
	"context"

	"google.golang.org/grpc"
)

// ReceiveHook changes how the methods of a service receive their
// requests: the one place that rewrites a grpc.ServiceDesc's handlers, for
// the registrars that must act before or around a request's decoding
// (Server: undecodable bytes; api.LimitRequests: the request limits; the
// node's request-byte budget). Interceptors come too late for them: gRPC
// has read and decoded the message before any interceptor runs.
type ReceiveHook struct {
	// Unary is called once per call of a unary method, with the call's
	// context and gRPC's decode function; it returns the decode function
	// the method's handler uses instead, and a function run when the
	// handler returns (nil for none).
	Unary func(ctx context.Context, dec func(any) error) (recv func(any) error, done func())
	// Stream is called once per call of a streaming method with its
	// stream (clientStreams: the method receives a stream of requests, not
	// one); it returns the stream the handler uses instead, and a function
	// run when the handler returns (nil for none).
	Stream func(ss grpc.ServerStream, clientStreams bool) (grpc.ServerStream, func())
}

// RegisterHooked registers impl on r under a copy of desc whose method
// handlers receive their requests through hook. desc is not modified.
func RegisterHooked(r grpc.ServiceRegistrar, desc *grpc.ServiceDesc, impl any, hook ReceiveHook) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			recv, done := hook.Unary(ctx, dec)
			if done != nil {
				defer done()
			}
			return h(srv, ctx, recv, interceptor)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		h, clientStreams := sd.Handler, sd.ClientStreams
		sd.Handler = func(srv any, ss grpc.ServerStream) error {
			hooked, done := hook.Stream(ss, clientStreams)
			if done != nil {
				defer done()
			}
			return h(srv, hooked)
		}
		d.Streams[i] = sd
	}
	r.RegisterService(&d, impl)
}
