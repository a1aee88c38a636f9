package chaos

import (
	"math/rand/v2"
	"sync"
	"time"
)

// The skeleton the group copiers share (the gRPC group copier, the Kafka
// copier, the librdkafka copier): member slots, each a goroutine running
// the slot's instances one after another, and a watch that ends the
// copier once its input is complete and it has caught up with it. Each
// copier supplies what an instance is and when it has caught up.

// startCopierSlots starts slots member slots (numbered from 1), each a
// goroutine that calls instance(slot, n, rng, stop) for n = 1, 2, ...
// until stop closes or the run ends; the slot's rng is seeded with seed
// and the slot. instance must return once stop closes. The returned end
// closes stop and waits for the slots' goroutines.
func (w *workload) startCopierSlots(slots int, seed uint64, instance func(slot, n int, rng *rand.Rand, stop <-chan struct{})) (end func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for s := 1; s <= slots; s++ {
		rng := rand.New(rand.NewPCG(seed, uint64(s)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; w.ctx.Err() == nil; n++ {
				select {
				case <-stop:
					return
				default:
				}
				instance(s, n, rng, stop)
			}
		}()
	}
	return func() {
		close(stop)
		wg.Wait()
	}
}

// watchCopier returns when the run ends, when caughtUp reports the copier
// what caught up with its input, or when it has not a delivery timeout
// plus a minute after ready first reported the copier ready to be judged
// (its input complete, and whatever else the copier waits for); it asks
// every half second, caughtUp only once ready.
func (w *workload) watchCopier(what string, ready, caughtUp func() bool) {
	var give time.Time
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		if !ready() {
			continue
		}
		if give.IsZero() {
			give = time.Now().Add(w.cfg.DeliveryTimeout + time.Minute)
		}
		if time.Now().After(give) {
			w.log.Warn(what + " did not catch up with its input")
			return
		}
		if caughtUp() {
			return
		}
	}
}
