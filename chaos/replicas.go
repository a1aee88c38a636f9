package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/storage"
)

// readReplicas reads every replica of every partition of the workload's
// topics (numbered as in the history, WorkloadConfig.logOf) from the
// stopped nodes' data directories (DATA/logs/TOPIC-P/), with the storage
// package's own recovery, as a restarted broker would. A node without a
// directory for a partition holds no replica of it.
func readReplicas(c *Cluster, wc WorkloadConfig) ([]checker.ReplicaLog, error) {
	var out []checker.ReplicaLog
	for _, n := range c.Nodes {
		for log := int32(0); log < wc.logs(); log++ {
			topic, p := wc.topicPartition(log)
			dir := filepath.Join(n.DataDir, "logs", fmt.Sprintf("%s-%d", topic, p))
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				continue
			}
			rl, err := readReplica(dir)
			if err != nil {
				return nil, fmt.Errorf("chaos: node %d %s partition %d: %w", n.ID, topic, p, err)
			}
			rl.Node, rl.Partition = n.ID, log
			out = append(out, rl)
		}
	}
	return out, nil
}

func readReplica(dir string) (checker.ReplicaLog, error) {
	l, err := storage.Open(dir, storage.DefaultConfig(), time.Now())
	if err != nil {
		return checker.ReplicaLog{}, err
	}
	defer l.Close()
	rl := checker.ReplicaLog{HighWatermark: l.HighWatermark()}
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			return rl, err
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, b := range res.Batches {
			h, err := batch.ParseHeader(b)
			if err != nil {
				return rl, err
			}
			// Control records (transaction markers) are kept, under a value
			// no write carries: they take offsets (a log whose last batch is
			// a marker ends after it) and replicas must agree on them too.
			control := h.IsControl()
			err = batch.ForEachRecord(b, func(r batch.Record) error {
				if r.Offset >= off {
					v := string(r.Value)
					if control {
						v = fmt.Sprintf("<control key %x>", r.Key)
					}
					rl.Records = append(rl.Records, checker.ReplicaRecord{Offset: r.Offset, Value: v})
				}
				return nil
			})
			if err != nil {
				return rl, err
			}
		}
		off = res.NextOffset
	}
	return rl, nil
}
