package node

import (
	"strings"
	"testing"
)

// The cluster defaults for new topics are 1 (Kafka's) and must not be
// negative; 0 stands for the default.
func TestConfigTopicDefaults(t *testing.T) {
	d := DefaultConfig()
	if d.DefaultReplicationFactor != 1 || d.DefaultMinInsyncReplicas != 1 {
		t.Errorf("defaults %d, %d; want 1, 1", d.DefaultReplicationFactor, d.DefaultMinInsyncReplicas)
	}
	if w := (Config{}).WithDefaults(); w.DefaultReplicationFactor != 1 || w.DefaultMinInsyncReplicas != 1 {
		t.Errorf("WithDefaults of zero: %d, %d; want 1, 1", w.DefaultReplicationFactor, w.DefaultMinInsyncReplicas)
	}
	for _, edit := range []func(*Config){
		func(c *Config) { c.DefaultReplicationFactor = -1 },
		func(c *Config) { c.DefaultMinInsyncReplicas = -3 },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must be >= 1") {
			t.Errorf("%+d/%+d: Validate = %v", c.DefaultReplicationFactor, c.DefaultMinInsyncReplicas, err)
		}
	}
}
