package controller

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func brokers(racks ...string) []PlacementBroker {
	out := make([]PlacementBroker, len(racks))
	for i, r := range racks {
		out[i] = PlacementBroker{ID: int32(i + 1), Rack: r}
	}
	return out
}

func TestPlaceSpreadsLeadersAndReplicas(t *testing.T) {
	cases := []struct {
		name           string
		brokers        int
		partitions, rf int32
	}{
		{"3 brokers rf3", 3, 6, 3},
		{"5 brokers rf3", 5, 10, 3},
		{"4 brokers rf2", 4, 8, 2},
		{"6 brokers rf1", 6, 12, 1},
		{"1 broker rf1", 1, 3, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs := brokers(make([]string, tc.brokers)...)
			got, err := Place(bs, PlacementSeed("topic"), tc.partitions, tc.rf)
			if err != nil {
				t.Fatal(err)
			}
			leaders := map[int32]int{}
			replicas := map[int32]int{}
			for p, a := range got {
				if len(a.Replicas) != int(tc.rf) {
					t.Fatalf("partition %d: %v", p, a.Replicas)
				}
				for i, id := range a.Replicas {
					if slices.Contains(a.Replicas[:i], id) {
						t.Fatalf("partition %d repeats broker %d: %v", p, id, a.Replicas)
					}
					replicas[id]++
				}
				leaders[a.Replicas[0]]++
			}
			// partitions is a multiple of brokers: perfectly even.
			for _, b := range bs {
				if want := int(tc.partitions) / tc.brokers; leaders[b.ID] != want {
					t.Errorf("broker %d leads %d partitions, want %d (%v)", b.ID, leaders[b.ID], want, got)
				}
				if want := int(tc.partitions*tc.rf) / tc.brokers; replicas[b.ID] != want {
					t.Errorf("broker %d holds %d replicas, want %d (%v)", b.ID, replicas[b.ID], want, got)
				}
			}
		})
	}
}

func TestPlaceIsDeterministicAndSeeded(t *testing.T) {
	bs := brokers("", "", "", "", "")
	a, _ := Place(bs, PlacementSeed("orders"), 5, 3)
	// Order of the input does not matter.
	rev := slices.Clone(bs)
	slices.Reverse(rev)
	b, _ := Place(rev, PlacementSeed("orders"), 5, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("placement depends on input order:\n%v\n%v", a, b)
	}
	// Different topics start on different brokers (for these names).
	starts := map[int32]bool{}
	for i := range 10 {
		p, _ := Place(bs, PlacementSeed(fmt.Sprintf("topic-%d", i)), 1, 1)
		starts[p[0].Replicas[0]] = true
	}
	if len(starts) < 2 {
		t.Errorf("10 topics all start on the same broker")
	}
}

func TestPlaceRackAware(t *testing.T) {
	cases := []struct {
		name  string
		racks []string
		rf    int32
		// minRacks is the number of distinct racks every partition must span.
		minRacks int
	}{
		{"3 racks, 2 brokers each, rf3", []string{"a", "a", "b", "b", "c", "c"}, 3, 3},
		{"3 racks uneven, rf3", []string{"a", "a", "a", "b", "c"}, 3, 3},
		{"2 racks, rf3 spans both", []string{"a", "a", "b", "b"}, 3, 2},
		{"brokers ordered by rack contiguously, rf2", []string{"a", "a", "a", "b", "b", "b"}, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs := brokers(tc.racks...)
			rackOf := map[int32]string{}
			for _, b := range bs {
				rackOf[b.ID] = b.Rack
			}
			for seed := uint32(0); seed < 20; seed++ {
				got, err := Place(bs, seed, 12, tc.rf)
				if err != nil {
					t.Fatal(err)
				}
				for p, a := range got {
					racks := map[string]bool{}
					for _, id := range a.Replicas {
						racks[rackOf[id]] = true
					}
					if len(racks) < tc.minRacks || len(a.Replicas) != int(tc.rf) {
						t.Fatalf("seed %d partition %d: replicas %v span racks %v, want >= %d", seed, p, a.Replicas, racks, tc.minRacks)
					}
				}
			}
		})
	}
}

func TestPlaceRejects(t *testing.T) {
	cases := []struct {
		name           string
		brokers        int
		partitions, rf int32
		code           sluicev1.ErrorCode
	}{
		{"rf larger than live brokers", 2, 1, 3, sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR},
		{"no live brokers", 0, 1, 1, sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR},
		{"rf zero", 3, 1, 0, sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR},
		{"no partitions", 3, 0, 1, sluicev1.ErrorCode_INVALID_PARTITIONS},
		{"too many partitions", 3, MaxPartitions + 1, 1, sluicev1.ErrorCode_INVALID_PARTITIONS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Place(brokers(make([]string, tc.brokers)...), 1, tc.partitions, tc.rf)
			if errs.Code(err) != tc.code {
				t.Fatalf("err = %v, want %v", err, tc.code)
			}
		})
	}
}

// Placement uses only unfenced brokers.
func TestLivePlacementBrokersSkipsFenced(t *testing.T) {
	im := build(t, append(threeBrokers(), FenceBroker{BrokerID: 2, BrokerEpoch: 2})...)
	got := LivePlacementBrokers(im)
	if want := []PlacementBroker{{ID: 1}, {ID: 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("live = %v, want %v", got, want)
	}
	if _, err := Place(got, 0, 1, 3); errs.Code(err) != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
		t.Fatalf("err = %v", err)
	}
}
