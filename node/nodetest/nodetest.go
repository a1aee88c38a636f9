// Package nodetest is the one in-process harness for Sluice nodes (STYLE
// §15): a single combined node (StartSingle) or a cluster of controller
// voters and brokers (NewCluster), started with node.Start inside the test
// binary, importable from any package's tests.
//
// Every listener it starts takes a free loopback port: gRPC (client and
// internal) and the Kafka protocol on 127.0.0.1:0, Raft and gossip from
// loopback.FreeAddrs (they must be known before the nodes start), HTTP
// disabled unless a test turns it on with 127.0.0.1:0. It never uses the
// defaults 9400–9404 and 9092, so tests pass while a real node holds them,
// and it reads no SLUICE_* environment variable.
// Every node it starts is stopped by the test's Cleanup.
package nodetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Timeouts of the harness's own waits.
const (
	// ReadyTimeout bounds waiting for a started node to be ready.
	ReadyTimeout = 30 * time.Second
	// StopTimeout bounds one node's graceful shutdown.
	StopTimeout = 20 * time.Second
	// RequestTimeout bounds one request of the helpers here.
	RequestTimeout = 20 * time.Second
)

// FreeAddrs returns n distinct loopback addresses whose TCP and UDP ports
// were free a moment ago and are handed out to nobody else
// (loopback.FreeAddrs); it fails tb if there are none.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs, err := loopback.FreeAddrs(n)
	if err != nil {
		tb.Fatal(err)
	}
	return addrs
}

// FreeAddr is FreeAddrs(tb, 1)[0]: for an address that must be known
// before the node that binds it starts (a static Raft quorum, gossip seeds,
// a dial map).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return FreeAddrs(tb, 1)[0]
}

// Config is node.DefaultConfig for one combined controller+broker with
// data in dir, every listener on a free loopback port (client and internal
// gRPC and Kafka 127.0.0.1:0, Raft and gossip from FreeAddrs) and HTTP
// disabled.
func Config(tb testing.TB, dir string) node.Config {
	tb.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir = dir
	addrs := FreeAddrs(tb, 2)
	cfg.Listen, cfg.InternalListen, cfg.RaftListen, cfg.GossipListen = "127.0.0.1:0", "127.0.0.1:0", addrs[0], addrs[1]
	cfg.KafkaListen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	return cfg
}

// Dial opens a client connection to addr, closed by tb's Cleanup.
func Dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// waitReady waits up to ReadyTimeout for n to be ready.
func waitReady(n *node.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	return n.WaitReady(ctx)
}

// Batch is a canonical record batch (no producer id) of n records with
// keys "k<i>", values "<prefix>-<i>" and timestamps ts+i.
func Batch(prefix string, n int, ts int64) []byte {
	var b batch.Builder
	b.Reset(ts)
	for i := 0; i < n; i++ {
		b.Add(ts+int64(i), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("%s-%d", prefix, i)), nil)
	}
	return b.Finish(batch.PlainProducer, 0)
}

// Values is the values of pd's records at offsets from and above, in
// offset order.
func Values(pd *sluicev1.PartitionData, from int64) []string {
	var out []string
	for _, b := range pd.Batches {
		for i, r := range b.Records {
			if b.BaseOffset+int64(i) >= from {
				out = append(out, string(r.Value))
			}
		}
	}
	return out
}

// requestContext is a context for one helper request, cancelled by tb's
// Cleanup at the latest.
func requestContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	tb.Cleanup(cancel)
	return ctx
}
