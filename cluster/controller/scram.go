package controller

import (
	"context"
	"slices"
	"sort"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// SCRAM credentials (issue 32; Kafka's UserScramCredentialRecord and
// RemoveUserScramCredentialRecord, KIP-554). The metadata log holds, per
// user and mechanism, what a server keeps of a SCRAM password (RFC 5802
// §3): the salt, the iteration count, StoredKey and ServerKey. Never the
// password, nor the salted password: whoever holds the salted password
// can authenticate as the user, whoever holds StoredKey cannot. Deriving
// the keys (package auth) is the edge's job: this package does not import
// auth (auth builds on the image), so it keeps its own copy of the few
// bounds it checks, and a test in package api holds the two equal.
//
// The checks below are the FSM's and are kept forever for records already
// logged: a stricter policy for new credentials (auth's minimum salt
// length) belongs at the edge, not here.

// The SCRAM mechanisms a credential may be stored for.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Bounds of a stored SCRAM credential (Kafka's iteration bounds).
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
	// MaxScramSaltLength bounds a salt: the edge makes them 32 bytes, and a
	// salt is copied into every snapshot and metadata stream.
	MaxScramSaltLength = 1024
	// MaxUserNameLength bounds a user name, in bytes.
	MaxUserNameLength = 255
)

// ScramKeyLength is the length of mechanism's StoredKey and ServerKey (the
// size of its hash), or 0 for a mechanism that is not served.
func ScramKeyLength(mechanism string) int {
	switch mechanism {
	case ScramSHA256:
		return 32
	case ScramSHA512:
		return 64
	}
	return 0
}

// ScramCredential is one user's credential for one mechanism, as the image
// keeps it. Its slices are never modified once in an image (a new
// credential replaces the value), so copies of the image may share them.
type ScramCredential struct {
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"` // H(HMAC(SaltedPassword, "Client Key"))
	ServerKey  []byte `json:"server_key"` // HMAC(SaltedPassword, "Server Key")
}

func (c ScramCredential) clone() ScramCredential {
	c.Salt, c.StoredKey, c.ServerKey = slices.Clone(c.Salt), slices.Clone(c.StoredKey), slices.Clone(c.ServerKey)
	return c
}

// UserScramCredential stores (or replaces) User's credential for
// Mechanism. The FSM refuses an invalid user name or credential
// (UNACCEPTABLE_CREDENTIAL) and a mechanism not served
// (UNSUPPORTED_SASL_MECHANISM). (Added to version 1 as a new type: a voter
// or broker that does not know it must not apply a log that holds it.)
type UserScramCredential struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// RemoveUserScramCredential deletes User's credential for Mechanism; a
// user left with none is no longer in the image. The FSM refuses a
// credential that does not exist (RESOURCE_NOT_FOUND). (Added to version 1
// as a new type, as UserScramCredential.)
type RemoveUserScramCredential struct {
	User      string `json:"user"`
	Mechanism string `json:"mechanism"`
}

// Type implements Record.
func (UserScramCredential) Type() RecordType { return TypeUserScramCredential }

// Type implements Record.
func (RemoveUserScramCredential) Type() RecordType { return TypeRemoveUserScramCredential }

// Credential is the credential r stores.
func (r UserScramCredential) Credential() ScramCredential {
	return ScramCredential{Iterations: r.Iterations, Salt: r.Salt, StoredKey: r.StoredKey, ServerKey: r.ServerKey}
}

func unacceptable(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, format, args...)
}

// ValidateUserName reports whether name can be a SCRAM user's (Kafka's
// rules): 1 to MaxUserNameLength bytes of UTF-8 without control
// characters. The error is UNACCEPTABLE_CREDENTIAL.
func ValidateUserName(name string) error {
	switch {
	case name == "":
		return unacceptable("user name is empty")
	case len(name) > MaxUserNameLength:
		return unacceptable("user name %q is %d bytes long, at most %d", errs.Echo(name), len(name), MaxUserNameLength)
	case !utf8.ValidString(name):
		return unacceptable("user name %q is not UTF-8", errs.Echo(name))
	}
	for _, c := range name {
		if unicode.IsControl(c) {
			return unacceptable("user name %q has the control character %U", errs.Echo(name), c)
		}
	}
	return nil
}

// checkScramMechanism refuses a mechanism not served
// (UNSUPPORTED_SASL_MECHANISM).
func checkScramMechanism(mechanism string) error {
	if ScramKeyLength(mechanism) == 0 {
		return errs.New(sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM,
			"SASL mechanism %q is not served: %s or %s", errs.Echo(mechanism), ScramSHA256, ScramSHA512)
	}
	return nil
}

// checkUserScramCredential is the FSM's check of r (it needs no image: an
// upsertion replaces whatever the user had).
func checkUserScramCredential(r UserScramCredential) error {
	if err := ValidateUserName(r.User); err != nil {
		return err
	}
	if err := checkScramMechanism(r.Mechanism); err != nil {
		return err
	}
	if r.Iterations < MinScramIterations || r.Iterations > MaxScramIterations {
		return unacceptable("user %q: %d iterations, must be within %d..%d", r.User, r.Iterations, MinScramIterations, MaxScramIterations)
	}
	if len(r.Salt) == 0 || len(r.Salt) > MaxScramSaltLength {
		return unacceptable("user %q: a salt of %d bytes, must be 1..%d", r.User, len(r.Salt), MaxScramSaltLength)
	}
	n := ScramKeyLength(r.Mechanism)
	if len(r.StoredKey) != n || len(r.ServerKey) != n {
		return unacceptable("user %q: %s keys are %d bytes, got a stored key of %d and a server key of %d",
			r.User, r.Mechanism, n, len(r.StoredKey), len(r.ServerKey))
	}
	return nil
}

// checkRemoveUserScramCredential is the FSM's check of r against im.
func checkRemoveUserScramCredential(im *Image, r RemoveUserScramCredential) error {
	if err := ValidateUserName(r.User); err != nil {
		return err
	}
	if err := checkScramMechanism(r.Mechanism); err != nil {
		return err
	}
	if _, ok := im.ScramCredential(r.User, r.Mechanism); !ok {
		return errs.New(sluicev1.ErrorCode_RESOURCE_NOT_FOUND, "user %q has no %s credential", r.User, r.Mechanism)
	}
	return nil
}

func applyUserScramCredential(im *Image, r UserScramCredential) error {
	if err := checkUserScramCredential(r); err != nil {
		return err
	}
	creds := im.Users[r.User]
	if creds == nil {
		creds = map[string]ScramCredential{}
		im.Users[r.User] = creds
	}
	creds[r.Mechanism] = r.Credential().clone()
	return nil
}

func applyRemoveUserScramCredential(im *Image, r RemoveUserScramCredential) error {
	if err := checkRemoveUserScramCredential(im, r); err != nil {
		return err
	}
	creds := im.Users[r.User]
	delete(creds, r.Mechanism)
	if len(creds) == 0 {
		delete(im.Users, r.User)
	}
	return nil
}

// ScramCredential is user's credential for mechanism, if it has one. The
// result's slices alias the image: do not modify them.
func (im *Image) ScramCredential(user, mechanism string) (ScramCredential, bool) {
	c, ok := im.Users[user][mechanism]
	return c, ok
}

// UserNames returns the names of the users with a SCRAM credential, in
// ascending order.
func (im *Image) UserNames() []string {
	names := make([]string, 0, len(im.Users))
	for n := range im.Users {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ScramMechanisms returns the mechanisms user has a credential for, in
// ascending order (SCRAM-SHA-256 first); nil for an unknown user.
func (im *Image) ScramMechanisms(user string) []string {
	var out []string
	for m := range im.Users[user] {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func cloneUsers(users map[string]map[string]ScramCredential) map[string]map[string]ScramCredential {
	out := make(map[string]map[string]ScramCredential, len(users))
	for u, creds := range users {
		c := make(map[string]ScramCredential, len(creds))
		for m, cr := range creds {
			c[m] = cr.clone()
		}
		out[u] = c
	}
	return out
}

// UserScramResult is the outcome of AlterUserScramCredentials for one
// user.
type UserScramResult struct {
	User string
	// Err is why none of the user's alterations was made; nil: all were.
	Err error
}

// planScramAlterations decides, from im, which users' alterations of a
// request can be made (pure). Alterations are grouped by user, users in
// the order first named (deletions, then upserts); a user's alterations
// are made all or none: the first of these refuses them all, in this
// order of checks:
//
//   - an invalid user name (UNACCEPTABLE_CREDENTIAL);
//   - a mechanism not served (UNSUPPORTED_SASL_MECHANISM);
//   - a mechanism named twice for the user, whether to delete or to store
//     (INVALID_REQUEST: the request does not say which comes first);
//   - an invalid credential (UNACCEPTABLE_CREDENTIAL);
//   - the deletion of a credential im does not hold (RESOURCE_NOT_FOUND).
//
// results[i] is the i-th user's outcome as planned, and records[i] its
// records to propose (nil when refused): its deletions, then its upserts,
// in request order. Since no mechanism of a user is named twice, the
// records of a user commute and each one applies to im alone.
func planScramAlterations(im *Image, upserts []UserScramCredential, deletions []RemoveUserScramCredential) (results []UserScramResult, records [][]Record) {
	index := map[string]int{}
	type alteration struct {
		mechanism string
		rec       Record
	}
	var byUser [][]alteration
	add := func(user, mechanism string, rec Record) {
		i, ok := index[user]
		if !ok {
			i = len(results)
			index[user] = i
			results = append(results, UserScramResult{User: user})
			byUser = append(byUser, nil)
		}
		byUser[i] = append(byUser[i], alteration{mechanism, rec})
	}
	for _, d := range deletions {
		add(d.User, d.Mechanism, d)
	}
	for _, u := range upserts {
		add(u.User, u.Mechanism, u)
	}
	records = make([][]Record, len(results))
	for i, alts := range byUser {
		err := ValidateUserName(results[i].User)
		for j := 0; err == nil && j < len(alts); j++ {
			err = checkScramMechanism(alts[j].mechanism)
		}
		for j := 0; err == nil && j < len(alts); j++ {
			if slices.ContainsFunc(alts[:j], func(a alteration) bool { return a.mechanism == alts[j].mechanism }) {
				err = invalid("user %q: %s is named twice in the request", results[i].User, alts[j].mechanism)
			}
		}
		for j := 0; err == nil && j < len(alts); j++ {
			switch r := alts[j].rec.(type) {
			case UserScramCredential:
				err = checkUserScramCredential(r)
			case RemoveUserScramCredential:
				err = checkRemoveUserScramCredential(im, r)
			}
		}
		if err != nil {
			results[i].Err = err
			continue
		}
		for _, a := range alts {
			records[i] = append(records[i], a.rec)
		}
	}
	return results, records
}

// AlterUserScramCredentials stores upserts and removes deletions (the
// credentials already derived: the controller never sees a password or a
// salted password), each user's all or none (planScramAlterations, on
// the leader's image after a barrier; the FSM checks each record again).
// It returns one result per user, in the order first named (deletions,
// then upserts), and the metadata offset that holds every change made.
// err is set when the call failed as a whole (NOT_CONTROLLER, ctx): then
// a user's alterations may or may not have been made, as with Propose.
func (c *Controller) AlterUserScramCredentials(ctx context.Context, upserts []UserScramCredential, deletions []RemoveUserScramCredential) ([]UserScramResult, uint64, error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var results []UserScramResult
	var perUser [][]Record
	var offset uint64
	if err := c.readForProposal(ctx, func(im *Image) {
		results, perUser = planScramAlterations(im, upserts, deletions)
		offset = im.Offset
	}); err != nil {
		return nil, 0, err
	}
	var recs []Record
	var owner []int // recs[j] is user owner[j]'s
	for i, rs := range perUser {
		recs = append(recs, rs...)
		for range rs {
			owner = append(owner, i)
		}
	}
	if len(recs) == 0 {
		return results, offset, nil
	}
	// One pipeline, as CreateTopics: proposeMu is held and the plan was
	// made on the current image, so a rejection here means leadership
	// changed hands (the error then says so).
	applied, perRecord, err := c.proposeEach(ctx, recs)
	for j, rerr := range perRecord {
		r := &results[owner[j]]
		if rerr != nil && r.Err == nil {
			r.Err = rerr
		}
		offset = max(offset, applied[j].Offset)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, r := range results {
		if r.Err == nil {
			c.log.Info("controller: SCRAM credentials altered", "user", r.User)
		}
	}
	return results, offset, nil
}
