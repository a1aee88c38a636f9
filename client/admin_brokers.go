package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// UnregisterBroker removes broker id's registration from the cluster
// metadata (Kafka's UnregisterBroker, KIP-631), for a broker gone for
// good. The controller's refusals are returned as an *errs.Error:
// BROKER_ID_NOT_REGISTERED for an unknown id, INVALID_REQUEST for a
// broker that is live (unfenced, or still heartbeating) or still a replica
// of some partition (the message says how many; reassign them first).
func (c *Client) UnregisterBroker(ctx context.Context, id int32) error {
	var resp *sluicev1.UnregisterBrokerResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).UnregisterBroker(ctx, &sluicev1.UnregisterBrokerRequest{
			BrokerId: id, TimeoutMs: c.adminTimeoutMs(ctx),
		})
		resp = r
		return err
	})
	if err != nil {
		return fmt.Errorf("unregister broker %d: %w", id, err)
	}
	return codeError(resp.ErrorCode, resp.ErrorMessage)
}
