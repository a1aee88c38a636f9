package group

import (
	"testing"
	"time"
)

func TestConfigWithDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.SessionTimeout != 45*time.Second || c.MinSessionTimeout != time.Second || c.MaxSessionTimeout != 30*time.Minute ||
		c.HeartbeatInterval != 5*time.Second || c.RebalanceTimeout != 60*time.Second || c.MaxSize != 0 ||
		c.DefaultAssignor != "uniform" || c.NewMemberID == nil {
		t.Fatalf("%+v", c)
	}
	set := Config{SessionTimeout: 10 * time.Second, MinSessionTimeout: 2 * time.Second, MaxSessionTimeout: time.Minute,
		HeartbeatInterval: time.Second, RebalanceTimeout: 3 * time.Second, MaxSize: 7, DefaultAssignor: "range"}.WithDefaults()
	if set.SessionTimeout != 10*time.Second || set.MinSessionTimeout != 2*time.Second || set.MaxSessionTimeout != time.Minute ||
		set.HeartbeatInterval != time.Second || set.RebalanceTimeout != 3*time.Second || set.MaxSize != 7 || set.DefaultAssignor != "range" {
		t.Fatalf("set fields changed: %+v", set)
	}
	// A group whose default is range uses it when nobody asks.
	g := New("g", Config{DefaultAssignor: "range", NewMemberID: counterIDs()})
	mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, meta("t", 2))
	if g.Assignor() != "range" {
		t.Fatal(g.Assignor())
	}
}
