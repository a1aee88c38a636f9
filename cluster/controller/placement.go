package controller

import (
	"hash/fnv"
	"slices"
	"sort"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// PlacementBroker is a broker that may receive replicas.
type PlacementBroker struct {
	ID   int32
	Rack string
}

// LivePlacementBrokers returns the unfenced brokers of im, ascending by id.
func LivePlacementBrokers(im *Image) []PlacementBroker {
	ids := im.LiveBrokers()
	out := make([]PlacementBroker, len(ids))
	for i, id := range ids {
		out[i] = PlacementBroker{ID: id, Rack: im.Brokers[id].Rack}
	}
	return out
}

// PlacementSeed is the deterministic start offset of topic's assignment: a
// hash of its name, so different topics start on different brokers without
// any randomness (the same request always yields the same assignment).
func PlacementSeed(topic string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return h.Sum32()
}

// Place assigns replicas for a new topic with the given number of
// partitions and replication factor over brokers (the live brokers). It is
// pure and deterministic in (brokers as a set, seed, partitions, rf).
//
// The scheme is Kafka's: brokers are ordered (alternating racks when every
// broker has a rack), partition p's first replica (its preferred leader) is
// broker (seed+p) mod n, so leaders go round-robin; followers follow at a
// shift that grows every n partitions, so followers spread too. With racks,
// a partition's replicas are on distinct racks as long as there are at
// least rf racks, and racks are reused evenly otherwise. Racks are ignored
// unless every broker has one.
//
// Errors: INVALID_PARTITIONS for partitions < 1, INVALID_REPLICATION_FACTOR
// for rf < 1 or rf > len(brokers).
func Place(brokers []PlacementBroker, seed uint32, partitions, rf int32) ([]PartitionAssignment, error) {
	if partitions < 1 || partitions > MaxPartitions {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "%d partitions, want 1..%d", partitions, MaxPartitions)
	}
	if rf < 1 {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR, "replication factor %d, want at least 1", rf)
	}
	if int(rf) > len(brokers) {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR,
			"replication factor %d is larger than the %d live brokers", rf, len(brokers))
	}
	order, rackOf := placementOrder(brokers)
	n := len(order)
	numRacks := 0
	if rackOf != nil {
		numRacks = len(distinct(rackOf))
	}
	start := int(seed % uint32(n))
	shiftBase := int((seed / uint32(n)) % uint32(n))
	out := make([]PartitionAssignment, partitions)
	for p := 0; p < int(partitions); p++ {
		first := (start + p) % n
		shift := shiftBase + p/n
		replicas := []int32{order[first]}
		usedRacks := map[string]bool{}
		if rackOf != nil {
			usedRacks[rackOf[order[first]]] = true
		}
		// Walk the other brokers from the shifted position. In rack mode,
		// prefer brokers on unused racks; once every rack holds a replica,
		// start a new round of racks. Terminates because rf <= n.
		for len(replicas) < int(rf) {
			added := false
			for k := 0; k < n-1 && len(replicas) < int(rf); k++ {
				id := order[(first+1+(shift+k)%(n-1))%n]
				if slices.Contains(replicas, id) {
					continue
				}
				if rackOf != nil {
					if usedRacks[rackOf[id]] {
						continue
					}
					usedRacks[rackOf[id]] = true
					if len(usedRacks) == numRacks {
						usedRacks = map[string]bool{}
					}
				}
				replicas = append(replicas, id)
				added = true
			}
			if !added {
				// Every remaining broker is on a used rack: start a new round.
				usedRacks = map[string]bool{}
			}
		}
		out[p] = PartitionAssignment{Replicas: replicas}
	}
	return out, nil
}

// placementOrder returns the broker ids in placement order and, when every
// broker has a rack, the rack of each. In rack mode the order alternates
// racks (r1b1, r2b1, r3b1, r1b2, ...), so consecutive brokers differ in rack.
func placementOrder(brokers []PlacementBroker) ([]int32, map[int32]string) {
	bs := slices.Clone(brokers)
	sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
	rackOf := map[int32]string{}
	for _, b := range bs {
		if b.Rack == "" {
			ids := make([]int32, len(bs))
			for i, b := range bs {
				ids[i] = b.ID
			}
			return ids, nil
		}
		rackOf[b.ID] = b.Rack
	}
	byRack := map[string][]int32{}
	for _, b := range bs {
		byRack[b.Rack] = append(byRack[b.Rack], b.ID)
	}
	racks := distinct(rackOf)
	var ids []int32
	for i := 0; len(ids) < len(bs); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				ids = append(ids, byRack[r][i])
			}
		}
	}
	return ids, rackOf
}

// distinct returns the distinct values of m, sorted.
func distinct(m map[int32]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range m {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}
