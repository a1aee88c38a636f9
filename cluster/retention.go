package cluster

import (
	"time"
)

// Start runs the retention, log cleaner and late-transaction loops until
// Close.
func (m *ReplicaManager) Start() {
	m.goroutines.Go(func() {
		t := time.NewTicker(m.cfg.RetentionCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case now := <-t.C:
				m.EnforceRetention(now)
			}
		}
	})
	m.goroutines.Go(func() {
		t := time.NewTicker(m.cfg.CleanerBackoff)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case now := <-t.C:
				m.CleanLogs(now)
			}
		}
	})
	m.goroutines.Go(func() {
		t := time.NewTicker(m.cfg.LateTransactionCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case now := <-t.C:
				m.LogLateTransactions(now)
			}
		}
	})
}

// ProducerIDExpiration is producer.id.expiration.ms: the producer state of
// an id idle this long is dropped (checked with retention).
const ProducerIDExpiration = 24 * time.Hour

// EnforceRetention applies retention to every partition once, and expires
// idle producer ids.
func (m *ReplicaManager) EnforceRetention(now time.Time) {
	for _, p := range m.healthyReplicas() {
		if n := p.log.ExpireProducers(now, ProducerIDExpiration); n > 0 {
			m.log.Info("expired idle producer ids", p.LogAttr(), "count", n)
		}
		if n, err := p.log.EnforceRetention(now); err != nil {
			if !p.Offline() { // a disk error is logged once (offline.go)
				m.log.Error("retention failed", p.LogAttr(), "err", err)
			}
		} else if n > 0 {
			m.log.Info("retention deleted segments", p.LogAttr(), "segments", n, "log_start_offset", p.log.StartOffset())
		}
	}
}
