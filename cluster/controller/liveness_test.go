package controller

import (
	"reflect"
	"testing"
	"time"
)

func TestLivenessExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// Brokers 1..3 registered at epochs 1..3 and unfenced.
	base := func() *Image { return build(t, threeBrokers()...) }
	type step func(l *Liveness, im *Image)
	hb := func(id int32, epoch int64, at int) step {
		return func(l *Liveness, im *Image) { l.Heartbeat(id, epoch, ms(at)) }
	}
	gone := func(id int32, at int) step { return func(l *Liveness, im *Image) { l.Gone(id, ms(at)) } }
	joined := func(id int32) step { return func(l *Liveness, im *Image) { l.Joined(id) } }
	fence := func(id int32) step { return func(l *Liveness, im *Image) { im.Brokers[id].Fenced = true } }
	reregister := func(id int32, epoch int64) step {
		return func(l *Liveness, im *Image) { im.Brokers[id].Epoch, im.Brokers[id].Fenced = epoch, false }
	}
	reset := func(at int) step { return func(l *Liveness, im *Image) { l.Reset(im, ms(at)) } }
	sees := func(at int) step { return func(l *Liveness, im *Image) { l.Expired(im, ms(at)) } }
	cases := []struct {
		name  string
		steps []step
		at    int
		want  []int32
	}{
		{name: "fresh leader gives everyone a full session", at: 1999},
		{name: "no heartbeat for the session timeout", at: 2000, want: []int32{1, 2, 3}},
		{name: "heartbeats keep sessions alive", steps: []step{hb(1, 1, 1500), hb(2, 2, 1500), hb(3, 3, 1500)}, at: 3000},
		{name: "one broker stops heartbeating", steps: []step{hb(1, 1, 1500), hb(3, 3, 1500)}, at: 3000, want: []int32{2}},
		{name: "heartbeat of an old epoch does not count", steps: []step{reregister(2, 9), sees(500), hb(1, 1, 1500), hb(2, 2, 1500), hb(3, 3, 1500)}, at: 2500, want: []int32{2}},
		{name: "fenced brokers are not fenced again", steps: []step{fence(1), hb(2, 2, 1500), hb(3, 3, 1500)}, at: 3000},
		{name: "gone after the grace", steps: []step{hb(1, 1, 100), gone(1, 200)}, at: 700, want: []int32{1}},
		{name: "gone within the grace", steps: []step{hb(1, 1, 100), gone(1, 200)}, at: 699},
		{name: "gone but still heartbeating", steps: []step{gone(1, 200), hb(1, 1, 300)}, at: 900},
		{name: "gone then joined", steps: []step{gone(1, 200), joined(1)}, at: 900},
		{name: "gone of an unknown broker is ignored", steps: []step{gone(7, 200)}, at: 900},
		{name: "gone heard before a new leader's reset", steps: []step{gone(2, 0), reset(100)}, at: 500, want: []int32{2}},
		{name: "a new registration after gone is not fenced by it", steps: []step{gone(2, 100), reregister(2, 9), sees(200), hb(2, 9, 300)}, at: 900},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := base()
			l := NewLiveness(2*time.Second, 500*time.Millisecond)
			l.Reset(im, t0)
			for _, s := range tc.steps {
				s(l, im)
			}
			var got []int32
			for _, f := range l.Expired(im, ms(tc.at)) {
				if f.BrokerEpoch != im.Brokers[f.BrokerID].Epoch {
					t.Errorf("fence of %d carries epoch %d, want %d", f.BrokerID, f.BrokerEpoch, im.Brokers[f.BrokerID].Epoch)
				}
				got = append(got, f.BrokerID)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("expired = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLivenessNewRegistrationStartsASession(t *testing.T) {
	t0 := time.Unix(1000, 0)
	im := build(t, threeBrokers()...)
	l := NewLiveness(time.Second, 100*time.Millisecond)
	l.Reset(NewImage(), t0) // leader elected before any broker registered
	if got := l.Expired(im, t0.Add(5*time.Second)); len(got) != 0 {
		t.Fatalf("first sight of brokers fenced them: %v", got)
	}
	if got := l.Expired(im, t0.Add(6*time.Second)); len(got) != 3 {
		t.Fatalf("after a silent session: %v, want all three", got)
	}
	delete(im.Brokers, 3)
	l.Expired(im, t0.Add(7*time.Second))
	if _, ok := l.sessions[3]; ok {
		t.Error("session of an unregistered broker kept")
	}
}
