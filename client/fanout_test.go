package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Every broker is asked; one that cannot be reached fails the whole call,
// named, while the answers of the others are still taken.
func TestAskEveryBrokerNamesTheFailedBroker(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr}, WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}, {NodeId: 2, Address: closedAddr(t)}}
	var took []int32
	err = askEveryBroker(ctxT(t), c, brokers,
		func(ctx context.Context, cc *grpc.ClientConn) (*sluicev1.ListGroupsResponse, sluicev1.ErrorCode, string, error) {
			resp, err := sluicev1.NewGroupsClient(cc).ListGroups(ctx, &sluicev1.ListGroupsRequest{})
			return resp, resp.GetErrorCode(), resp.GetErrorMessage(), err
		},
		func(node int32, _ *sluicev1.ListGroupsResponse) error {
			took = append(took, node)
			return nil
		})
	if err == nil || !strings.Contains(err.Error(), "broker 2: ") || strings.Contains(err.Error(), "broker 1") {
		t.Fatalf("err %v, want broker 2's failure alone", err)
	}
	if len(took) != 1 || took[0] != 1 {
		t.Errorf("answers taken from %v, want [1]", took)
	}
}
