package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
)

// legacyCatalog is meta/topics.json, the topic list of single-node Sluice
// before the controller quorum (no topic metadata lived anywhere else).
type legacyCatalog struct {
	Version int `json:"version"`
	Topics  []struct {
		Name       string            `json:"name"`
		ID         string            `json:"id"`
		Partitions int32             `json:"partitions"`
		Configs    map[string]string `json:"configs,omitempty"`
	} `json:"topics"`
}

const legacyCatalogFile = "topics.json"

// migrateLegacyCatalog imports the topics of a pre-controller single-node
// data dir into the metadata log, keeping their topic ids so that the
// existing partition logs are adopted, not deleted. It runs only on a
// single-voter controller that is also a broker (the only shape that
// version had), once: the file is renamed to topics.json.migrated after
// every topic is in the image.
func (n *Node) migrateLegacyCatalog() {
	path := filepath.Join(n.cfg.DataDir, "meta", legacyCatalogFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		n.log.Error("legacy topic catalog unreadable; topics not imported", "path", path, "err", err)
		return
	}
	if n.ctl == nil || n.replicas == nil || len(n.ctl.Voters()) != 1 {
		n.log.Error("legacy topic catalog found on a node that is not a single combined controller; not imported", "path", path)
		return
	}
	var cat legacyCatalog
	if err := json.Unmarshal(data, &cat); err != nil {
		n.log.Error("legacy topic catalog is corrupt; topics not imported", "path", path, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	// Wait for leadership and for this broker's registration (the
	// assignment must name a registered broker).
	for !n.ctl.IsLeader() || n.ctl.Image().ClusterID == "" || n.ctl.Image().Brokers[n.cfg.NodeID] == nil {
		select {
		case <-ctx.Done():
			n.log.Error("legacy topic catalog not imported: no controller leadership or broker registration", "err", ctx.Err())
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	self := n.cfg.NodeID
	for _, t := range cat.Topics {
		if n.ctl.Image().Topics[t.Name] != nil {
			continue
		}
		rec := controller.CreateTopic{Name: t.Name, TopicID: t.ID, Configs: t.Configs}
		for range t.Partitions {
			rec.Partitions = append(rec.Partitions, controller.PartitionAssignment{Replicas: []int32{self}})
		}
		if _, err := n.ctl.Propose(ctx, rec); err != nil {
			n.log.Error("importing a legacy topic failed; will retry at the next start", "topic", t.Name, "err", err)
			return
		}
		n.log.Info("imported legacy topic", "topic", t.Name, "partitions", t.Partitions, "topic_id", t.ID)
	}
	if err := os.Rename(path, path+".migrated"); err != nil {
		n.log.Error("legacy topic catalog imported but not renamed", "err", fmt.Errorf("rename: %w", err))
	}
}
