package output

// ScramCredential is one entry of "user list --output json": a JSON
// array, one entry per credential, by user then mechanism ([] when there
// is none). Never a key or a salt.
type ScramCredential struct {
	User      string `json:"user"`
	Mechanism string `json:"mechanism"` // SCRAM-SHA-256 or SCRAM-SHA-512
	// Iterations is the credential's iteration count (4096 to 16384).
	Iterations int32 `json:"iterations"`
}
