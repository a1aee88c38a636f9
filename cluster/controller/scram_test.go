package controller

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// scram is a valid credential record of user for mechanism whose bytes
// are fill (so two of them differ by fill).
func scram(user, mechanism string, fill byte) UserScramCredential {
	n := ScramKeyLength(mechanism)
	if n == 0 {
		n = 32
	}
	return UserScramCredential{User: user, Mechanism: mechanism, Iterations: 8192, Salt: bytes.Repeat([]byte{fill}, 32),
		StoredKey: bytes.Repeat([]byte{fill + 1}, n), ServerKey: bytes.Repeat([]byte{fill + 2}, n)}
}

func unscram(user, mechanism string) RemoveUserScramCredential {
	return RemoveUserScramCredential{User: user, Mechanism: mechanism}
}

// with returns r after edit.
func with(r UserScramCredential, edit func(*UserScramCredential)) UserScramCredential {
	edit(&r)
	return r
}

// withUsers is two users: alice with both mechanisms, bob with SHA-512.
func withUsers() []Record {
	return []Record{scram("alice", ScramSHA256, 1), scram("alice", ScramSHA512, 2), scram("bob", ScramSHA512, 3)}
}

// The credential records are logged as JSON like the others, their bytes
// in base64, and read back equal.
func TestScramRecordsRoundTrip(t *testing.T) {
	r := UserScramCredential{User: "alice", Mechanism: ScramSHA256, Iterations: 4096, Salt: []byte("salt"), StoredKey: []byte{1}, ServerKey: []byte{2}}
	data, err := EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"UserScramCredential","version":1,"user":"alice","mechanism":"SCRAM-SHA-256","iterations":4096,"salt":"c2FsdA==","stored_key":"AQ==","server_key":"Ag=="}`
	if string(data) != want {
		t.Errorf("encoding %s, want %s", data, want)
	}
	for _, rec := range []Record{r, scram("bob", ScramSHA512, 7), unscram("alice", ScramSHA512)} {
		data, err := EncodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRecord(data)
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Errorf("round trip of %s = %#v, %v; want %#v", data, got, err, rec)
		}
	}
	data, _ = EncodeRecord(unscram("alice", ScramSHA512))
	if want := `{"type":"RemoveUserScramCredential","version":1,"user":"alice","mechanism":"SCRAM-SHA-512"}`; string(data) != want {
		t.Errorf("encoding %s, want %s", data, want)
	}
}

// The FSM stores a valid credential (replacing the user's credential of
// the same mechanism), removes one that exists, and refuses every other
// record with its code, leaving the image as it was.
func TestApplyScramCredentialRules(t *testing.T) {
	long := strings.Repeat("u", MaxUserNameLength)
	cases := []struct {
		name  string
		rec   Record
		code  sluicev1.ErrorCode // NONE = accepted
		check func(t *testing.T, im *Image)
	}{
		{name: "a new user's credential is stored", rec: scram("carol", ScramSHA256, 9),
			check: func(t *testing.T, im *Image) {
				c, ok := im.ScramCredential("carol", ScramSHA256)
				want := scram("carol", ScramSHA256, 9).Credential()
				if !ok || !reflect.DeepEqual(c, want) {
					t.Errorf("carol's credential = %+v, %v; want %+v", c, ok, want)
				}
			}},
		{name: "a credential replaces the user's of the same mechanism", rec: scram("alice", ScramSHA256, 9),
			check: func(t *testing.T, im *Image) {
				c, _ := im.ScramCredential("alice", ScramSHA256)
				if c.Salt[0] != 9 || len(im.Users["alice"]) != 2 {
					t.Errorf("alice: %+v", im.Users["alice"])
				}
			}},
		{name: "a user name of 255 bytes", rec: scram(long, ScramSHA256, 9)},
		{name: "a user name with spaces, commas and non-ASCII letters", rec: scram("Zoë, admin=1", ScramSHA512, 9)},
		{name: "the removal of one of two credentials keeps the user", rec: unscram("alice", ScramSHA256),
			check: func(t *testing.T, im *Image) {
				if _, ok := im.ScramCredential("alice", ScramSHA256); ok || len(im.Users["alice"]) != 1 {
					t.Errorf("alice: %+v", im.Users["alice"])
				}
			}},
		{name: "the removal of the last credential removes the user", rec: unscram("bob", ScramSHA512),
			check: func(t *testing.T, im *Image) {
				if _, ok := im.Users["bob"]; ok || !reflect.DeepEqual(im.UserNames(), []string{"alice"}) {
					t.Errorf("users: %v", im.UserNames())
				}
			}},

		{name: "an empty user name", rec: scram("", ScramSHA256, 9), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a user name of 256 bytes", rec: scram(long+"u", ScramSHA256, 9), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a user name with a newline", rec: scram("eve\nadmin", ScramSHA256, 9), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a user name with a NUL", rec: scram("eve\x00", ScramSHA256, 9), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a user name that is not UTF-8", rec: scram("eve\xff", ScramSHA256, 9), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a mechanism not served", rec: scram("carol", "SCRAM-SHA-1", 9), code: sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM},
		{name: "a mechanism in lower case", rec: scram("carol", "scram-sha-256", 9), code: sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM},
		{name: "4095 iterations", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.Iterations = 4095 }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "16385 iterations", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.Iterations = 16385 }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "no salt", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.Salt = nil }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a salt above the maximum", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.Salt = make([]byte, MaxScramSaltLength+1) }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "SHA-256 keys for SHA-512", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.Mechanism = ScramSHA512 }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a short stored key", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.StoredKey = r.StoredKey[:31] }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "a long server key", rec: with(scram("carol", ScramSHA256, 9), func(r *UserScramCredential) { r.ServerKey = append(r.ServerKey, 0) }),
			code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
		{name: "the removal of an unknown user's credential", rec: unscram("carol", ScramSHA256), code: sluicev1.ErrorCode_RESOURCE_NOT_FOUND},
		{name: "the removal of a credential the user does not have", rec: unscram("bob", ScramSHA256), code: sluicev1.ErrorCode_RESOURCE_NOT_FOUND},
		{name: "the removal of a mechanism not served", rec: unscram("bob", "PLAIN"), code: sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM},
		{name: "the removal for an empty user name", rec: unscram("", ScramSHA256), code: sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, withUsers()...)
			before := im.Clone()
			_, err := Apply(im, tc.rec, im.Offset+1)
			if got := errs.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if tc.code != sluicev1.ErrorCode_NONE {
				if !reflect.DeepEqual(im, before) {
					t.Errorf("a refused record changed the image")
				}
				return
			}
			if im.Offset != before.Offset+1 {
				t.Errorf("offset %d, want %d", im.Offset, before.Offset+1)
			}
			if tc.check != nil {
				tc.check(t, im)
			}
			// What was applied survives a snapshot.
			data, err := EncodeSnapshot(im)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im) {
				t.Errorf("snapshot round trip: %+v, %v", back, err)
			}
		})
	}
}

// The image keeps its own copy of a stored credential: the record's
// slices may be reused after Apply (the Record contract).
func TestApplyScramCredentialCopiesTheRecord(t *testing.T) {
	r := scram("carol", ScramSHA256, 9)
	im := build(t, r)
	r.Salt[0], r.StoredKey[0], r.ServerKey[0] = 0, 0, 0
	if c, _ := im.ScramCredential("carol", ScramSHA256); c.Salt[0] != 9 || c.StoredKey[0] != 10 || c.ServerKey[0] != 11 {
		t.Errorf("the image's credential changed with the record: %+v", c)
	}
}

// Clone copies the users deeply: changing the copy's maps or bytes leaves
// the original as it was.
func TestCloneCopiesUsers(t *testing.T) {
	im := build(t, withUsers()...)
	frozen := build(t, withUsers()...)
	c := im.Clone()
	if !reflect.DeepEqual(c, im) {
		t.Fatal("the clone differs")
	}
	cred := c.Users["alice"][ScramSHA256]
	cred.Salt[0], cred.StoredKey[0], cred.ServerKey[0] = 0xff, 0xff, 0xff
	delete(c.Users["alice"], ScramSHA512)
	delete(c.Users, "bob")
	c.Users["mallory"] = map[string]ScramCredential{ScramSHA256: {}}
	if !reflect.DeepEqual(im, frozen) {
		t.Errorf("changing the clone changed the image: %+v", im.Users)
	}
	// A zero image clones to empty users, as NewImage has them.
	if z := (&Image{}).Clone(); z.Users == nil || len(z.Users) != 0 {
		t.Errorf("clone of a zero image: users %v", z.Users)
	}
}

// A snapshot of a cluster without users is what it was before users
// existed (no "users" key), and reads back as NewImage's empty map.
func TestSnapshotWithoutUsersHasNoUsersKey(t *testing.T) {
	im := build(t, withTopic()...)
	data, err := EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"users"`) {
		t.Errorf("snapshot %s names users", data)
	}
	back, err := DecodeSnapshot(data)
	if err != nil || !reflect.DeepEqual(back, im) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	// With users: the keys and salts are in it, base64, and come back.
	im = build(t, withUsers()...)
	data, _ = EncodeSnapshot(im)
	if !strings.Contains(string(data), `"stored_key":"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="`) {
		t.Errorf("snapshot %s lacks alice's stored key", data)
	}
	if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im) {
		t.Errorf("round trip with users: %+v, %v", back, err)
	}
}

// planScramAlterations: one result per user in the order first named,
// deletions first; a user's alterations are made all or none, the first
// failed check naming the reason.
func TestPlanScramAlterations(t *testing.T) {
	im := build(t, withUsers()...)
	before := im.Clone()
	type want struct {
		user    string
		code    sluicev1.ErrorCode
		records int
	}
	cases := []struct {
		name      string
		upserts   []UserScramCredential
		deletions []RemoveUserScramCredential
		want      []want
	}{
		{name: "users in the order first named, deletions first",
			upserts:   []UserScramCredential{scram("dave", ScramSHA256, 9), scram("alice", ScramSHA256, 9), scram("carol", ScramSHA512, 9)},
			deletions: []RemoveUserScramCredential{unscram("bob", ScramSHA512), unscram("alice", ScramSHA512)},
			want:      []want{{"bob", 0, 1}, {"alice", 0, 2}, {"dave", 0, 1}, {"carol", 0, 1}}},
		{name: "two mechanisms of one user are two alterations",
			upserts: []UserScramCredential{scram("carol", ScramSHA256, 9), scram("carol", ScramSHA512, 9)},
			want:    []want{{"carol", 0, 2}}},
		{name: "a mechanism named twice refuses the user, not the others",
			upserts: []UserScramCredential{scram("carol", ScramSHA256, 9), scram("dave", ScramSHA256, 9), scram("carol", ScramSHA256, 8)},
			want:    []want{{"carol", sluicev1.ErrorCode_INVALID_REQUEST, 0}, {"dave", 0, 1}}},
		{name: "a deletion and an upsert of one mechanism are named twice",
			upserts:   []UserScramCredential{scram("alice", ScramSHA256, 9)},
			deletions: []RemoveUserScramCredential{unscram("alice", ScramSHA256)},
			want:      []want{{"alice", sluicev1.ErrorCode_INVALID_REQUEST, 0}}},
		{name: "each refused user gets the first reason found",
			upserts:   []UserScramCredential{scram("bob", ScramSHA256, 9)},
			deletions: []RemoveUserScramCredential{unscram("carol", ScramSHA256), unscram("bob", ScramSHA512), unscram("bob", ScramSHA256+"x")},
			want:      []want{{"carol", sluicev1.ErrorCode_RESOURCE_NOT_FOUND, 0}, {"bob", sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM, 0}}},
		{name: "a user's deletions and upserts of different mechanisms are all made",
			upserts:   []UserScramCredential{scram("bob", ScramSHA256, 9)},
			deletions: []RemoveUserScramCredential{unscram("alice", ScramSHA256), unscram("bob", ScramSHA512)},
			want:      []want{{"alice", 0, 1}, {"bob", 0, 2}}},
		{name: "a credential to delete that the user does not have refuses its upserts",
			upserts:   []UserScramCredential{scram("alice", ScramSHA256, 9), scram("carol", ScramSHA256, 9)},
			deletions: []RemoveUserScramCredential{unscram("carol", ScramSHA512), unscram("alice", ScramSHA512)},
			want:      []want{{"carol", sluicev1.ErrorCode_RESOURCE_NOT_FOUND, 0}, {"alice", 0, 2}}},
		{name: "an invalid credential refuses the user's other alterations",
			upserts: []UserScramCredential{scram("alice", ScramSHA512, 9),
				with(scram("alice", ScramSHA256, 9), func(r *UserScramCredential) { r.Iterations = 100 })},
			want: []want{{"alice", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, 0}}},
		{name: "an invalid user name", upserts: []UserScramCredential{scram("", ScramSHA256, 9)},
			want: []want{{"", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, 0}}},
		{name: "nothing", want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			results, records := planScramAlterations(im, tc.upserts, tc.deletions)
			if len(results) != len(tc.want) || len(records) != len(tc.want) {
				t.Fatalf("%d results and %d record lists, want %d: %+v", len(results), len(records), len(tc.want), results)
			}
			for i, w := range tc.want {
				if results[i].User != w.user || errs.Code(results[i].Err) != w.code || len(records[i]) != w.records {
					t.Errorf("user %d: %q %v, %d records; want %q %v, %d records", i, results[i].User, results[i].Err, len(records[i]), w.user, w.code, w.records)
				}
			}
			// The records of the users accepted apply, in order.
			after := im.Clone()
			for _, rs := range records {
				for _, r := range rs {
					if _, err := Apply(after, r, after.Offset+1); err != nil {
						t.Errorf("planned record %+v: %v", r, err)
					}
				}
			}
		})
	}
	if !reflect.DeepEqual(im, before) {
		t.Error("planning changed the image")
	}
}

// Through a running single-voter controller: the alterations are logged,
// each user's outcome answered, and the offset returned holds them.
func TestControllerAlterUserScramCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	// Once the cluster is bootstrapped nothing else is proposed: the
	// offsets below are the alterations'.
	wait.For(t, 10*time.Second, "single voter leads, cluster bootstrapped", func() error {
		if im := c.Image(); !c.IsLeader() || im.ClusterID == "" || len(im.Features) != len(SupportedFeatures) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	results, offset, err := c.AlterUserScramCredentials(ctx,
		[]UserScramCredential{scram("alice", ScramSHA256, 1), scram("alice", ScramSHA512, 2), scram("bob", ScramSHA256, 3), scram("carol", "MD5", 4)},
		[]RemoveUserScramCredential{unscram("dave", ScramSHA256)})
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]string, len(results))
	for i, r := range results {
		codes[i] = fmt.Sprintf("%s:%v", r.User, errs.Code(r.Err))
	}
	if got, want := strings.Join(codes, " "), "dave:RESOURCE_NOT_FOUND alice:NONE bob:NONE carol:UNSUPPORTED_SASL_MECHANISM"; got != want {
		t.Errorf("results %s, want %s", got, want)
	}
	im := c.Image()
	if offset == 0 || offset > im.Offset || !reflect.DeepEqual(im.UserNames(), []string{"alice", "bob"}) ||
		!reflect.DeepEqual(im.ScramMechanisms("alice"), []string{ScramSHA256, ScramSHA512}) {
		t.Fatalf("offset %d (image at %d), users %v", offset, im.Offset, im.Users)
	}
	if got, _ := im.ScramCredential("bob", ScramSHA256); !reflect.DeepEqual(got, scram("bob", ScramSHA256, 3).Credential()) {
		t.Errorf("bob's credential %+v", got)
	}

	// Deleting every credential of alice removes her; a refusal alone
	// proposes nothing and returns the image's offset.
	results, offset, err = c.AlterUserScramCredentials(ctx, nil,
		[]RemoveUserScramCredential{unscram("alice", ScramSHA256), unscram("alice", ScramSHA512)})
	if err != nil || len(results) != 1 || results[0].Err != nil {
		t.Fatalf("delete alice: %+v, %v", results, err)
	}
	if im := c.Image(); offset != im.Offset || !reflect.DeepEqual(im.UserNames(), []string{"bob"}) {
		t.Errorf("after deleting alice: offset %d (image at %d), users %v", offset, im.Offset, im.UserNames())
	}
	results, offset2, err := c.AlterUserScramCredentials(ctx, nil, []RemoveUserScramCredential{unscram("alice", ScramSHA256)})
	if err != nil || errs.Code(results[0].Err) != sluicev1.ErrorCode_RESOURCE_NOT_FOUND || offset2 != offset {
		t.Errorf("delete alice again: %+v, offset %d (was %d), %v", results, offset2, offset, err)
	}
}
