package output

// ClientQuota is one entry of "quota list --output json": a JSON array,
// one entry per entity, by user then client id ([] when there is none).
type ClientQuota struct {
	// User and ClientID are the entity's components: a name, "<default>",
	// or absent (omitted).
	User     string `json:"user,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	// Quotas by key: producer_byte_rate, consumer_byte_rate (bytes/s),
	// request_percentage (percent of one request thread).
	Quotas map[string]float64 `json:"quotas"`
}
