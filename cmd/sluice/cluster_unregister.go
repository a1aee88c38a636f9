package main

import (
	"context"
	"fmt"
	"math"
)

// clusterUnregisterBroker removes a broker's registration: for a node
// decommissioned, or a registration under a wrong id, that would
// otherwise stay in "cluster status" for good (issue 28).
func (e *env) clusterUnregisterBroker(ctx context.Context, args []string) error {
	fs := e.newFlags("cluster unregister-broker", "cluster unregister-broker --broker N\n\n"+
		"Removes broker N's registration from the cluster metadata (Kafka's UnregisterBroker). Refused\n"+
		"while the broker is live (unfenced, or still heartbeating: stop it and wait the broker session\n"+
		"timeout) and while it is a replica of any partition (move those first with 'sluice topic reassign').\n"+
		"A node that starts again later registers anew.")
	broker := fs.Int("broker", -1, "id of the broker to unregister (required)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *broker < 0 || *broker > math.MaxInt32 {
		return fmt.Errorf("cluster unregister-broker: --broker is required (a broker id >= 0)")
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	id := int32(*broker)
	if err := c.UnregisterBroker(ctx, id); err != nil {
		return fmt.Errorf("cluster unregister-broker: %w", err)
	}
	fmt.Fprintf(e.stdout, "broker %d unregistered\n", id)
	return nil
}
