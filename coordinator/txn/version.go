package txn

import "fmt"

// ClientVersion is the transaction protocol version a transaction's
// client speaks (Kafka's TransactionVersion as kept in
// TransactionMetadata.clientTransactionVersion, KIP-890). Sluice serves
// both versions Kafka 4.x serves, and acts on each transaction by the
// version its client spoke:
//
//   - TV1 (Kafka's levels 0 and 1): the client adds partitions itself
//     (AddPartitionsToTxn, AddOffsetsToTxn); a partition leader receiving
//     its transactional produce, and the group coordinator receiving its
//     TxnOffsetCommit, only verify that the partition is in the
//     transaction (KIP-890 part 1). EndTxn keeps the producer epoch:
//     Prepare*, the markers and Complete* all carry the epoch of the
//     transaction's data, and the producer keeps that epoch (and its
//     sequences) for its next transaction.
//   - TV2 (level 2 and above): the partition leader adds the partition
//     (KIP-890 part 2), and every commit or abort bumps the epoch; the
//     markers carry the bumped epoch, one above the data's.
//
// The zero value is Kafka's level 0 and means TV1, as in Kafka: a
// request that does not say otherwise is an old client's. The gRPC door
// always speaks TV2 and says so.
type ClientVersion int8

// The versions. Kafka's level 0 (ClientVersion(0)) behaves as TV1.
const (
	TV1 ClientVersion = 1
	TV2 ClientVersion = 2
)

// SupportsEpochBump reports TV2 or later: an epoch bump at every commit
// and abort, partitions added by the partition leader (Kafka's
// TransactionVersion.supportsEpochBump).
func (v ClientVersion) SupportsEpochBump() bool { return v >= TV2 }

// String is "TV0", "TV1" or "TV2", as Kafka names the levels.
func (v ClientVersion) String() string { return fmt.Sprintf("TV%d", int8(v)) }
