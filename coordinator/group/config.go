package group

import (
	"crypto/rand"
	"encoding/base64"
	"time"
)

// Defaults of Config (Kafka's group.consumer.* settings where they exist).
const (
	DefaultSessionTimeout    = 45 * time.Second
	DefaultMinSessionTimeout = time.Second
	DefaultMaxSessionTimeout = 30 * time.Minute
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultRebalanceTimeout  = 60 * time.Second
	// DefaultRegexRefreshInterval is Kafka's
	// group.consumer.regex.refresh.interval.ms default.
	DefaultRegexRefreshInterval = 10 * time.Second
)

// Config is a group's configuration. The zero value of each field means
// its default (WithDefaults).
type Config struct {
	// SessionTimeout is the session of members that send 0 (45 s).
	SessionTimeout time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (1 s, 30 min): INVALID_SESSION_TIMEOUT outside.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// HeartbeatInterval is answered to members (5 s), never above a third
	// of the member's session timeout.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is the rebalance timeout of members that send 0
	// (60 s): how long a member has to release revoked partitions.
	RebalanceTimeout time.Duration
	// MaxSize caps the members (departed static members included, as they
	// hold partitions); 0: unlimited. A join beyond it gets
	// GROUP_MAX_SIZE_REACHED.
	MaxSize int
	// RegexRefreshInterval is how often a heartbeat runs its member's
	// TopicFilter over its regex's matches again (10 s): a DESCRIBE
	// granted or revoked reaches the subscription within it. Topics
	// created or deleted are resolved at once (MetadataChanged).
	RegexRefreshInterval time.Duration
	// DefaultAssignor is the assignor of a group whose members ask for
	// none, and the winner of ties ("uniform").
	DefaultAssignor string
	// NewMemberID returns a new member id for a join that brings none. It
	// must not return an id twice. Default: 22 characters of URL-safe
	// base64 over 16 random bytes from crypto/rand (Kafka's Uuid format);
	// tests inject a deterministic source.
	NewMemberID func() string
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.RegexRefreshInterval == 0 {
		c.RegexRefreshInterval = DefaultRegexRefreshInterval
	}
	if c.DefaultAssignor == "" {
		c.DefaultAssignor = UniformAssignorName
	}
	if c.NewMemberID == nil {
		c.NewMemberID = randomMemberID
	}
	return c
}

func randomMemberID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read does not fail on supported platforms (Go 1.24+
		// crashes the program instead); keep the contract anyway.
		panic("group: crypto/rand: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}
