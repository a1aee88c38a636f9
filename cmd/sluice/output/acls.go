package output

// Acl is one entry of "acl list --output json" (and of acl create's and
// acl delete's): a JSON array, one entry per ACL, ordered by resource
// (type, name, pattern type), principal, host, operation and permission
// ([] when there is none). The enumerations are Kafka's names.
type Acl struct {
	ResourceType string `json:"resource_type"` // TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID
	ResourceName string `json:"resource_name"` // "*" (LITERAL): every resource of the type
	PatternType  string `json:"pattern_type"`  // LITERAL or PREFIXED
	Principal    string `json:"principal"`     // TYPE:NAME; User:* is every user
	Host         string `json:"host"`          // an IP address, or "*"
	// Operation is READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
	// CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE or
	// ALL.
	Operation  string `json:"operation"`
	Permission string `json:"permission"` // ALLOW or DENY
}
