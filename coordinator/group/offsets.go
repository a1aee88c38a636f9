package group

import (
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// CheckOffsetCommit applies OffsetCommit's member rules (KIP-848):
//   - a negative epoch (-1) from outside the membership commits only while
//     the group has no members, departed static members included (they
//     still own partitions): nil then; otherwise the member must exist;
//   - an unknown member: UNKNOWN_MEMBER_ID;
//   - an epoch above the member's: FENCED_MEMBER_EPOCH (the committer is
//     from an incarnation this coordinator never gave that epoch to; it
//     must join again);
//   - an epoch below the member's: STALE_MEMBER_EPOCH (retriable once
//     its heartbeat brought the new epoch).
//
// Kafka's ConsumerGroup.validateOffsetCommit answers STALE_MEMBER_EPOCH
// for any mismatch; the split above is KIP-848's text and Sluice's
// proto. OffsetFetch's member check is the same with epoch -1 meaning no
// check (the caller skips the call).
func (g *Group) CheckOffsetCommit(memberID string, memberEpoch int32) error {
	if memberEpoch < 0 && len(g.members) == 0 {
		return nil
	}
	m, ok := g.members[memberID]
	if !ok {
		if memberID == "" {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %s has members: commits from outside the membership are refused", g.id)
		}
		return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "member %s is not in group %s", errs.Echo(memberID), g.id)
	}
	switch {
	case memberEpoch > m.epoch:
		return errs.New(sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, "member %s committed with epoch %d, above its epoch %d", errs.Echo(memberID), memberEpoch, m.epoch)
	case memberEpoch < m.epoch:
		return errs.New(sluicev1.ErrorCode_STALE_MEMBER_EPOCH, "member %s committed with epoch %d, below its epoch %d", errs.Echo(memberID), memberEpoch, m.epoch)
	}
	return nil
}

// CheckTxnOffsetCommit applies KIP-447's zombie fencing to TxnOffsetCommit:
//   - member id "" with epoch -1: no member check (a producer outside any
//     membership);
//   - an unknown member: UNKNOWN_MEMBER_ID;
//   - an instance id given that is not the member's: FENCED_INSTANCE_ID;
//   - an epoch other than the member's: ILLEGAL_GENERATION — Kafka's
//     answer for consumer-protocol groups (OffsetMetadataManager
//     .validateTransactionalOffsetCommit turns the group's
//     STALE_MEMBER_EPOCH into ILLEGAL_GENERATION); the transaction must
//     abort.
func (g *Group) CheckTxnOffsetCommit(memberID string, memberEpoch int32, instanceID string) error {
	if memberID == "" && memberEpoch == LeaveEpoch {
		return nil
	}
	m, ok := g.members[memberID]
	if !ok {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "member %s is not in group %s", errs.Echo(memberID), g.id)
	}
	if instanceID != "" && instanceID != m.instanceID {
		return errs.New(sluicev1.ErrorCode_FENCED_INSTANCE_ID, "member %s has instance id %q, not %q", errs.Echo(memberID), errs.Echo(m.instanceID), errs.Echo(instanceID))
	}
	if memberEpoch != m.epoch {
		return errs.New(sluicev1.ErrorCode_ILLEGAL_GENERATION, "member %s is at epoch %d, not %d", errs.Echo(memberID), m.epoch, memberEpoch)
	}
	return nil
}
