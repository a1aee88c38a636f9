package api

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/internal/wait"
)

// blockingStream is a server stream whose receives block until the
// stream ends (ended closed), as gRPC's do until the handler has returned
// or the client sends; sends after the end fail.
type blockingStream struct {
	grpc.ServerStream
	ctx   context.Context
	ended chan struct{}
}

func (s *blockingStream) Context() context.Context { return s.ctx }

func (s *blockingStream) RecvMsg(any) error {
	<-s.ended
	return io.EOF
}

func (s *blockingStream) SendMsg(any) error {
	select {
	case <-s.ended:
		return errors.New("stream ended")
	default:
		return nil
	}
}

// Rule (docs/locks.md, serveStream): draining ends a long-lived stream at
// once, whatever serve is blocked on; serve's goroutine, which is not
// waited for, does not leak: it ends with the stream (a blocked receive)
// or with its context (cancelled when the handler returns), and nothing
// it sends afterwards reaches the stream.
func TestServeStreamGoroutineEndsWithItsStream(t *testing.T) {
	for _, blockedIn := range []string{"receive", "context"} {
		t.Run(blockedIn, func(t *testing.T) {
			ss := &blockingStream{ctx: context.Background(), ended: make(chan struct{})}
			draining := make(chan struct{})
			entered := make(chan struct{})
			served := make(chan struct{})
			var out *streamSender
			handler := make(chan error, 1)
			go func() {
				handler <- serveStream(ss, draining, func(ctx context.Context, o *streamSender) error {
					defer close(served)
					out = o
					close(entered)
					if blockedIn == "receive" {
						return ss.RecvMsg(nil)
					}
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			<-entered
			close(draining)
			select {
			case err := <-handler:
				if !errors.Is(err, errNodeStopping) {
					t.Fatalf("serveStream = %v, want %v", err, errNodeStopping)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("serveStream did not return after draining")
			}
			if err := out.send(struct{}{}); !errors.Is(err, errStreamClosed) {
				t.Fatalf("a send after the handler returned = %v, want %v", err, errStreamClosed)
			}
			if blockedIn == "receive" {
				select {
				case <-served:
					t.Fatal("serve returned while its receive was still blocked")
				default:
				}
				close(ss.ended) // gRPC ends the stream once the handler has returned
			}
			wait.Until(t, 5*time.Second, "serve's goroutine ended", func() bool {
				select {
				case <-served:
					return true
				default:
					return false
				}
			})
		})
	}
}
