package group

import "time"

// reconcile moves m towards its target assignment (Kafka's
// CurrentAssignmentBuilder.build). owned is what the member reported it
// owns (nil when it did not report). It reports whether m's assignment
// changed.
//
// The rules, from KIP-848:
//   - Stable at an older epoch: compute the next step from what it holds.
//   - UnrevokedPartitions: nothing happens until a heartbeat reports the
//     pending partitions released (owned set and disjoint from them);
//     then the member goes on at epoch+1.
//   - UnreleasedPartitions: compute again; partitions others released
//     since are given now.
func (g *Group) reconcile(now time.Time, m *member, owned Assignment, ownedSet bool) bool {
	if m.reconciledTo(g.assignmentEpoch) {
		return false
	}
	switch m.state {
	case MemberStable:
		return g.nextAssignment(now, m, m.epoch, owned, ownedSet)
	case MemberUnrevokedPartitions:
		if ownsAny(owned, ownedSet, m.pending) {
			return false
		}
		return g.nextAssignment(now, m, m.epoch+1, owned, ownedSet)
	default: // MemberUnreleasedPartitions
		return g.nextAssignment(now, m, m.epoch, owned, ownedSet)
	}
}

// ownsAny reports whether the member may still own one of revoked: it did
// not report what it owns, or reported one of them.
func ownsAny(owned Assignment, ownedSet bool, revoked Assignment) bool {
	if !ownedSet {
		return true
	}
	return owned.intersects(revoked)
}

// nextAssignment is Kafka's computeNextAssignment:
//
//	kept       = assigned ∩ target
//	revoke     = assigned − target
//	newlyGiven = target − kept − (partitions another member holds)
//
// With something to revoke that the member may still own, the member stays
// at memberEpoch in UnrevokedPartitions and is answered kept only;
// otherwise it moves to the target epoch and is answered kept ∪
// newlyGiven, in UnreleasedPartitions while another member still holds
// part of its target, else Stable.
func (g *Group) nextAssignment(now time.Time, m *member, memberEpoch int32, owned Assignment, ownedSet bool) bool {
	target := g.target[m.id]
	var kept, revoke, given []topicPartition
	unreleased := false
	for t, ps := range m.assigned {
		for _, p := range ps {
			if target.Contains(t, p) {
				kept = append(kept, topicPartition{t, p})
			} else {
				revoke = append(revoke, topicPartition{t, p})
			}
		}
	}
	for t, ps := range target {
		for _, p := range ps {
			if m.assigned.Contains(t, p) {
				continue
			}
			if o := g.ownerOf(t, p); o != "" && o != m.id {
				unreleased = true
				continue
			}
			given = append(given, topicPartition{t, p})
		}
	}
	before, beforePending, beforeState := m.assigned, m.pending, m.state
	revoked := fromPartitions(revoke)
	if len(revoke) > 0 && ownsAny(owned, ownedSet, revoked) {
		g.setEpoch(m, memberEpoch)
		g.setOwnership(m, fromPartitions(kept), revoked)
		m.state = MemberUnrevokedPartitions
		if beforeState != MemberUnrevokedPartitions || !beforePending.Equal(revoked) || m.revokeDeadline.IsZero() {
			m.revokeDeadline = now.Add(m.rebalanceTimeout)
		}
	} else {
		// The epoch first: what is given is stamped with it (restamp).
		g.setEpoch(m, g.assignmentEpoch)
		g.setOwnership(m, fromPartitions(append(kept, given...)), nil)
		if unreleased {
			m.state = MemberUnreleasedPartitions
		} else {
			m.state = MemberStable
		}
		m.revokeDeadline = time.Time{}
	}
	return !before.Equal(m.assigned)
}

// setEpoch moves m to epoch, remembering the one it leaves (KIP-848
// accepts a heartbeat at the previous epoch whose answer was lost).
func (g *Group) setEpoch(m *member, epoch int32) {
	if epoch != m.epoch {
		m.previousEpoch, m.epoch = m.epoch, epoch
	}
}
