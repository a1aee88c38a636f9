// Command gen-errors-doc prints docs/errors.md, the table of Sluice error
// codes, from the ErrorCode enum in proto/sluice/v1/errors.proto:
//
//	go run ./scripts/gen-errors-doc > docs/errors.md
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/sluice-io/sluice/proto/errs"
)

// meanings holds a one-line meaning for every ErrorCode; the program fails
// if a code has none, so that a new code cannot be added undocumented.
var meanings = map[string]string{
	"NONE":                             "Success.",
	"UNKNOWN_SERVER_ERROR":             "An unexpected error on the broker; see its log.",
	"OFFSET_OUT_OF_RANGE":              "The requested offset is below the log start offset or above the high watermark.",
	"CORRUPT_RECORD":                   "The batch bytes are malformed or fail their CRC.",
	"UNKNOWN_TOPIC_OR_PARTITION":       "The topic or partition does not exist (or this broker does not know it yet).",
	"INVALID_FETCH_SIZE":               "The requested fetch size is invalid.",
	"LEADER_NOT_AVAILABLE":             "The partition has no leader right now (an election is in progress).",
	"NOT_LEADER_OR_FOLLOWER":           "This broker is not the leader (or a replica) of the partition; refresh metadata.",
	"REQUEST_TIMED_OUT":                "The request did not complete in time (for example acks=all waiting for replicas).",
	"MESSAGE_TOO_LARGE":                "The batch is larger than the topic's max.message.bytes.",
	"INVALID_TOPIC_EXCEPTION":          "The topic name is invalid or the topic is internal.",
	"RECORD_LIST_TOO_LARGE":            "The request's batches together exceed the broker's request size limit.",
	"NOT_ENOUGH_REPLICAS":              "Fewer in-sync replicas than min.insync.replicas; the batch was not appended.",
	"NOT_ENOUGH_REPLICAS_AFTER_APPEND": "The batch was appended but the in-sync set shrank below min.insync.replicas before it was acknowledged.",
	"INVALID_REQUIRED_ACKS":            "The acks value is not supported.",
	"INVALID_TIMESTAMP":                "A record timestamp is outside the range the topic accepts.",
	"TOPIC_ALREADY_EXISTS":             "A topic with this name already exists.",
	"INVALID_PARTITIONS":               "The partition count is invalid (zero, negative, or a decrease).",
	"INVALID_REPLICATION_FACTOR":       "The replication factor is invalid or larger than the number of brokers.",
	"INVALID_REPLICA_ASSIGNMENT":       "The explicit replica assignment is invalid.",
	"INVALID_CONFIG":                   "A topic or broker config name or value is invalid.",
	"NOT_CONTROLLER":                   "This broker is not the controller; send the request to the controller.",
	"INVALID_REQUEST":                  "The request is malformed or inconsistent.",
	"POLICY_VIOLATION":                 "The request violates a configured policy.",
	"OUT_OF_ORDER_SEQUENCE_NUMBER":     "The batch's base sequence is not the next one expected for this producer and partition.",
	"DUPLICATE_SEQUENCE_NUMBER":        "The batch was already appended (a retried idempotent produce); the original result stands.",
	"INVALID_PRODUCER_EPOCH":           "The producer epoch is older than the current one for this producer id.",
	"INVALID_TXN_STATE":                "The operation is not allowed in the transaction's current state.",
	"INVALID_PRODUCER_ID_MAPPING":      "The producer id does not match the one mapped to the transactional id.",
	"INVALID_TRANSACTION_TIMEOUT":      "The transaction timeout is larger than the broker's maximum.",
	"CONCURRENT_TRANSACTIONS":          "Another transaction operation for this producer is still in progress.",
	"TRANSACTION_COORDINATOR_FENCED":   "The transaction coordinator has been replaced by a newer one.",
	"COORDINATOR_LOAD_IN_PROGRESS":     "The coordinator is still loading its state.",
	"COORDINATOR_NOT_AVAILABLE":        "The coordinator is not available.",
	"NOT_COORDINATOR":                  "This broker is not the coordinator for the key; find the coordinator again.",
	"KAFKA_STORAGE_ERROR":              "A disk error on the broker took its replica of the partition offline (until the broker restarts); the controller moves the leadership to another in-sync replica: refresh the metadata and retry.",
	"UNKNOWN_PRODUCER_ID":              "The broker has no state for this producer id (for example after retention removed it).",
	"REASSIGNMENT_IN_PROGRESS":         "The partition is already being reassigned to another target; wait until that reassignment completes.",
	"UNSUPPORTED_COMPRESSION_TYPE":     "The batch uses a compression type the broker does not accept (only none today).",
	"STALE_BROKER_EPOCH":               "The request carries an old broker epoch.",
	"FENCED_LEADER_EPOCH":              "The leader epoch in the request is older than the broker's.",
	"UNKNOWN_LEADER_EPOCH":             "The leader epoch in the request is newer than the broker's.",
	"OFFSET_NOT_AVAILABLE":             "The requested offset is not available yet (for example the high watermark is still advancing after an election).",
	"INVALID_RECORD":                   "The batch is well formed but breaks a rule (record count, offset deltas, unknown fields, header key encoding, ...).",
	"PRODUCER_FENCED":                  "A newer producer with the same transactional id has started; this one must stop.",
	"TRANSACTIONAL_ID_NOT_FOUND":       "The transactional id is not known to the coordinator.",
	"TRANSACTION_ABORTABLE":            "The transaction cannot go on; abort it, then the producer may begin a new one.",
	"INVALID_UPDATE_VERSION":           "A partition change named a stale partition epoch; re-read the partition and decide again.",
	"INELIGIBLE_REPLICA":               "An ISR change would add a replica that is fenced or not assigned to the partition.",
	"OFFSET_METADATA_TOO_LARGE":        "A committed offset's metadata is longer than 4096 bytes.",
	"ILLEGAL_GENERATION":               "An offset commit inside a transaction came from a member epoch that is not the member's current one (a zombie, KIP-447); abort the transaction.",
	"INVALID_GROUP_ID":                 "The group id is empty or too long.",
	"UNKNOWN_MEMBER_ID":                "The member is not (or no longer) in the group; join again with member epoch 0.",
	"INVALID_SESSION_TIMEOUT":          "The session timeout is outside the broker's group.consumer.min/max.session.timeout.ms.",
	"NON_EMPTY_GROUP":                  "The group still has members; they must leave (or expire) first.",
	"GROUP_ID_NOT_FOUND":               "The group does not exist.",
	"GROUP_MAX_SIZE_REACHED":           "The group has group.consumer.max.size members already.",
	"FENCED_INSTANCE_ID":               "Another member holds this static instance id.",
	"UNSTABLE_OFFSET_COMMIT":           "Offsets of the partition are pending in an open transaction; retry once it ends.",
	"FENCED_MEMBER_EPOCH":              "The member's epoch is not the coordinator's: it lost its partitions and must join again with epoch 0.",
	"UNRELEASED_INSTANCE_ID":           "A static member rejoined while its previous incarnation still holds the instance id; retry after it left.",
	"UNSUPPORTED_ASSIGNOR":             "The server assignor named is not one of uniform or range.",
	"STALE_MEMBER_EPOCH":               "An offset commit carried an epoch older than the member's; retry with the current epoch.",
	"NEW_LEADER_ELECTED":               "The partition's leader changed while the request was in flight; retry with the new leader.",
}

func main() {
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprint(w, `# Error codes

<!-- Generated by "go run ./scripts/gen-errors-doc > docs/errors.md" from
proto/sluice/v1/errors.proto. Do not edit. -->

Every per-partition (or per-topic) result in a response carries an `+"`error_code`"+` from the
`+"`sluice.v1.ErrorCode`"+` enum. Names and numbers follow Apache Kafka's. A **retriable** code
means the client may send the same request again, possibly after refreshing metadata (to find a
new leader or coordinator); other codes need a change to the request or the configuration.

Failures of a whole request are reported as gRPC status codes instead, with a
`+"`google.rpc.ErrorInfo`"+` detail whose `+"`reason`"+` is the `+"`ErrorCode`"+` name.

| Name | Number | Retriable | Meaning |
|---|---:|---|---|
`)
	missing := 0
	for _, e := range errs.Table() {
		name := e.Code.String()
		m, ok := meanings[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "gen-errors-doc: no meaning for %s; add one to scripts/gen-errors-doc/main.go\n", name)
			missing++
		}
		r := "no"
		if e.Retriable {
			r = "yes"
		}
		fmt.Fprintf(w, "| `%s` | %d | %s | %s |\n", name, int32(e.Code), r, m)
	}
	if missing > 0 {
		os.Exit(1)
	}
	if len(meanings) != len(errs.Table()) {
		fmt.Fprintln(os.Stderr, "gen-errors-doc: meanings lists codes that are not in errors.proto")
		os.Exit(1)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "gen-errors-doc:", err)
		os.Exit(1)
	}
}
