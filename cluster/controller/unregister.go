package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Unregistering a broker (Kafka's UnregisterBroker, KIP-631; issue 28). A
// registration stays in the image until it is removed: a node
// decommissioned, or a broker registered once under a wrong id, stays in
// `sluice cluster status` and counts as a registered broker for ever.
// `sluice cluster unregister-broker` removes it, with two guards Kafka
// does not have (its controller removes an active broker from every ISR
// and lets it register again):
//
//   - the broker must not be live: not unfenced, and not heard from
//     within the broker session timeout (a fenced broker still catching
//     up, or in controlled shutdown, heartbeats);
//   - it must not be a replica of any partition: the image would then
//     name a broker it does not know. The operator reassigns those
//     partitions first (`sluice topic reassign`).
//
// A broker that starts again after its removal registers anew, as after
// any lost registration.

// applyUnregisterBroker removes a fenced broker that hosts no replica,
// at its current epoch.
func applyUnregisterBroker(im *Image, r UnregisterBroker) error {
	b := im.Brokers[r.BrokerID]
	if b == nil {
		return errs.New(sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED, "broker %d is not registered", r.BrokerID)
	}
	if b.Epoch != r.BrokerEpoch {
		return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH,
			"broker %d epoch %d is not the current epoch %d", r.BrokerID, r.BrokerEpoch, b.Epoch)
	}
	if !b.Fenced {
		return invalid("broker %d is live (unfenced); stop it before unregistering it", r.BrokerID)
	}
	if n := HostedPartitions(im, r.BrokerID); n > 0 {
		return invalid("broker %d is still a replica of %s; move them to other brokers first (sluice topic reassign), then unregister it",
			r.BrokerID, partitionCount(n))
	}
	delete(im.Brokers, r.BrokerID)
	return nil
}

// HostedPartitions is the number of partitions in im that list broker id
// among their replicas (a running reassignment's adding and removing
// replicas are among them). Pure.
func HostedPartitions(im *Image, id int32) int {
	n := 0
	for _, t := range im.Topics {
		for _, p := range t.Partitions {
			if slices.Contains(p.Replicas, id) {
				n++
			}
		}
	}
	return n
}

func partitionCount(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return fmt.Sprintf("%d partitions", n)
}

// UnregisterBroker removes broker id's registration (see
// UnregisterBroker, the record). On the active controller it refuses,
// before proposing anything, an unknown id (BROKER_ID_NOT_REGISTERED) and
// a live broker (INVALID_REQUEST): unfenced, or fenced but heard from (or
// first seen by this controller) within SessionTimeout, so a broker that
// is starting or shutting down is never removed under it. The FSM checks
// the replicas and the fencing again. Other errors: NOT_CONTROLLER and
// timeouts.
func (c *Controller) UnregisterBroker(ctx context.Context, id int32) error {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var b Broker
	var found bool
	if err := c.readForProposal(ctx, func(im *Image) {
		if p := im.Brokers[id]; p != nil {
			b, found = *p, true
		}
	}); err != nil {
		return err
	}
	if !found {
		return errs.New(sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED, "broker %d is not registered", id)
	}
	if !b.Fenced {
		return invalid("broker %d is live (unfenced); stop it before unregistering it", id)
	}
	c.livenessMu.Lock()
	heard := c.liveness.Heard(id, b.Epoch, time.Now())
	c.livenessMu.Unlock()
	if heard {
		return invalid("broker %d is fenced but still heartbeating (or was heard from less than the broker session timeout %v ago); stop it, wait, and try again",
			id, c.cfg.SessionTimeout)
	}
	if _, err := c.Propose(ctx, UnregisterBroker{BrokerID: id, BrokerEpoch: b.Epoch}); err != nil {
		return err
	}
	c.log.Info("controller: broker unregistered", "broker", id, "epoch", b.Epoch, "address", b.Address)
	return nil
}
