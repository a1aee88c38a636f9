package output

// GroupListing is one entry of "group list --output json" (a JSON array
// sorted by group id, [] when there is none). docs/groups.md documents
// every field; keep the two in step.
type GroupListing struct {
	GroupID     string `json:"group_id"`
	State       string `json:"state"`
	Members     int32  `json:"members"`
	Coordinator int32  `json:"coordinator"`
	// Type is "consumer" (KIP-848) or "classic" (JoinGroup/SyncGroup).
	Type string `json:"type"`
	// ProtocolType is a classic group's protocol type ("consumer").
	ProtocolType string `json:"protocol_type"`
}

// Group is "group describe --output json": one object. Error is "" when
// the coordinator answered, else the error code and message (the other
// fields are then zero). Members and Offsets are [] when empty.
type Group struct {
	GroupID         string `json:"group_id"`
	Error           string `json:"error"`
	State           string `json:"state"`
	GroupEpoch      int32  `json:"group_epoch"`
	AssignmentEpoch int32  `json:"assignment_epoch"`
	Assignor        string `json:"assignor"`
	Coordinator     int32  `json:"coordinator"`
	// Type is "consumer" (KIP-848: the epochs and assignor apply) or
	// "classic" (Generation, ProtocolType, Protocol and Leader apply).
	Type         string `json:"type"`
	Generation   int32  `json:"generation"`
	ProtocolType string `json:"protocol_type"`
	Protocol     string `json:"protocol"`
	Leader       string `json:"leader"`
	// Isolation is what Lag is measured to: "read_committed" (the last
	// stable offset) or "read_uncommitted" (the high watermark).
	Isolation string        `json:"isolation"`
	Members   []GroupMember `json:"members"`
	Offsets   []GroupOffset `json:"offsets"`
}

// GroupMember is one member in Group.Members, by member id.
type GroupMember struct {
	MemberID    string   `json:"member_id"`
	InstanceID  string   `json:"instance_id"`
	ClientID    string   `json:"client_id"`
	RackID      string   `json:"rack_id"`
	ClientHost  string   `json:"client_host"`
	MemberEpoch int32    `json:"member_epoch"`
	State       string   `json:"state"`
	Subscribed  []string `json:"subscribed_topics"`
	// SubscribedRegex is a KIP-848 member's regular-expression
	// subscription ("" when none); Subscribed are the names the member
	// gave, not what the expression matched.
	SubscribedRegex  string       `json:"subscribed_topic_regex"`
	Assignment       []GroupTopic `json:"assignment"`
	TargetAssignment []GroupTopic `json:"target_assignment"`
}

// GroupTopic is a topic with partitions, ascending.
type GroupTopic struct {
	Name       string  `json:"name"`
	Partitions []int32 `json:"partitions"`
}

// GroupOffset is one partition in Group.Offsets (by topic and
// partition): every partition the group has a committed offset for or
// assigns. Committed is -1 when none is committed; HighWatermark,
// LastStableOffset and Lag are null when unknown (Error says why when the
// leader did not answer). Owner is the member id that owns the partition,
// "" when none.
type GroupOffset struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	Owner            string `json:"owner"`
	Committed        int64  `json:"committed"`
	LastStableOffset *int64 `json:"last_stable_offset"`
	HighWatermark    *int64 `json:"high_watermark"`
	Lag              *int64 `json:"lag"`
	Error            string `json:"error,omitempty"`
}

// OffsetReset is "group reset-offsets --output json": the plan, and
// whether it was committed (--execute).
type OffsetReset struct {
	GroupID    string           `json:"group_id"`
	Executed   bool             `json:"executed"`
	Partitions []PartitionReset `json:"partitions"`
}

// PartitionReset is one partition of OffsetReset: Current is -1 when
// nothing is committed.
type PartitionReset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Current   int64  `json:"current"`
	New       int64  `json:"new"`
}
