package deploy

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What docs/kubernetes.md promises, surviving the loss of a node, holds
// for a topic created without naming a replication factor (issue 28):
// every controller of every overlay gives new topics replication factor 3
// and min.insync.replicas 2, and the overlay runs at least 3 brokers for
// those replicas.
func TestManifestTopicDefaultsSurviveANode(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			brokers, controllers := 0, 0
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				for ord := range int(*sts.Spec.Replicas) {
					p := podOf(t, m, sts, ord, "default", "10.0.0.1")
					roles := []string{"controller", "broker"}
					if v, ok := p.setting("roles"); ok {
						roles = strings.Split(v, ",")
					}
					if slices.Contains(roles, "broker") {
						brokers++
					}
					if !slices.Contains(roles, "controller") {
						continue
					}
					controllers++
					for flag, want := range map[string]int{"default-replication-factor": 3, "default-min-insync-replicas": 2} {
						v, ok := p.setting(flag)
						if n, err := strconv.Atoi(v); !ok || err != nil || n != want {
							t.Errorf("%s: --%s %q (set %v), want %d", p.Name, flag, v, ok, want)
						}
					}
				}
			}
			if controllers == 0 || brokers < 3 {
				t.Errorf("%d controllers, %d brokers: want controllers and at least 3 brokers for replication factor 3", controllers, brokers)
			}
		})
	}
}
