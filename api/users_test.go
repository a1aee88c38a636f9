package api_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The controller keeps its own copy of the SCRAM bounds (it must not
// import auth); they are auth's.
func TestControllerScramBoundsAreAuths(t *testing.T) {
	if controller.MinScramIterations != auth.MinScramIterations || controller.MaxScramIterations != auth.MaxScramIterations {
		t.Errorf("controller iterations %d..%d, auth's %d..%d", controller.MinScramIterations, controller.MaxScramIterations,
			auth.MinScramIterations, auth.MaxScramIterations)
	}
	if controller.MaxScramSaltLength < auth.MinScramSaltLen || controller.MaxScramSaltLength < len(auth.NewSalt()) {
		t.Errorf("controller salts up to %d bytes: auth makes them %d, at least %d", controller.MaxScramSaltLength, len(auth.NewSalt()), auth.MinScramSaltLen)
	}
	if got := []string{controller.ScramSHA256, controller.ScramSHA512}; !reflect.DeepEqual(got, []string{string(auth.ScramSHA256), string(auth.ScramSHA512)}) ||
		len(auth.ScramMechanisms) != len(got) {
		t.Errorf("controller mechanisms %v, auth's %v", got, auth.ScramMechanisms)
	}
	for _, m := range auth.ScramMechanisms {
		if controller.ScramKeyLength(string(m)) != m.KeyLen() {
			t.Errorf("%s: controller keys of %d bytes, auth's %d", m, controller.ScramKeyLength(string(m)), m.KeyLen())
		}
	}
}

// scramUser is a user's credential as a client sends it.
type scramUser struct {
	name, password string
	mech           auth.ScramMechanism
	iterations     int
	salt, salted   []byte
}

func newScramUser(t *testing.T, name string, mech auth.ScramMechanism, iterations int) scramUser {
	t.Helper()
	u := scramUser{name: name, password: "pw of " + name, mech: mech, iterations: iterations, salt: auth.NewSalt()}
	var err error
	if u.salted, err = auth.SaltPassword(mech, u.password, u.salt, iterations); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u scramUser) upsertion() *sluicev1.ScramCredentialUpsertion {
	return &sluicev1.ScramCredentialUpsertion{Name: u.name, Mechanism: string(u.mech), Iterations: int32(u.iterations), Salt: u.salt, SaltedPassword: u.salted}
}

// results is an AlterUserScramCredentials answer as "user:CODE ...".
func results(resp *sluicev1.AlterUserScramCredentialsResponse) string {
	var out []string
	for _, r := range resp.Results {
		out = append(out, r.User+":"+r.ErrorCode.String())
	}
	return strings.Join(out, " ")
}

// described is a DescribeUserScramCredentials answer as
// "user:CODE[MECH/ITERATIONS,...] ...".
func described(resp *sluicev1.DescribeUserScramCredentialsResponse) string {
	var out []string
	for _, u := range resp.Users {
		var creds []string
		for _, c := range u.Credentials {
			creds = append(creds, fmt.Sprintf("%s/%d", c.Mechanism, c.Iterations))
		}
		out = append(out, fmt.Sprintf("%s:%v%v", u.User, u.ErrorCode, creds))
	}
	return strings.Join(out, " ")
}

// Issue 32, through a node: a user's SCRAM credentials are stored by the
// Admin RPC, as StoredKey and ServerKey derived from the salted password
// (what auth.NewScramCredential derives, on the broker's image as on the
// controller's), described with their mechanism and iteration count only,
// and deleted. The salted password reaches neither the metadata log nor
// a describe answer.
func TestUserScramCredentialsStoredDescribedAndDeleted(t *testing.T) {
	tn := startNode(t, t.TempDir())
	alice256 := newScramUser(t, "alice", auth.ScramSHA256, 8192)
	alice512 := newScramUser(t, "alice", auth.ScramSHA512, 4096)
	bob := newScramUser(t, "bob", auth.ScramSHA512, 16384)
	resp, err := tn.admin.AlterUserScramCredentials(ctx(t), &sluicev1.AlterUserScramCredentialsRequest{
		Upsertions: []*sluicev1.ScramCredentialUpsertion{alice256.upsertion(), bob.upsertion(), alice512.upsertion()}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := results(resp), "alice:NONE bob:NONE"; got != want {
		t.Fatalf("results %s, want %s", got, want)
	}

	// The answer came once this broker's image held the credentials: the
	// keys derived from the salted password, nothing else.
	for _, u := range []scramUser{alice256, alice512, bob} {
		want, err := auth.NewScramCredential(u.mech, u.iterations, u.salt, u.salted)
		if err != nil {
			t.Fatal(err)
		}
		for where, im := range map[string]*controller.Image{"broker": tn.node.Metadata().Image(), "controller": tn.node.Controller().Image()} {
			got, ok := im.ScramCredential(u.name, string(u.mech))
			if !ok || got.Iterations != u.iterations || !bytes.Equal(got.Salt, u.salt) ||
				!bytes.Equal(got.StoredKey, want.StoredKey) || !bytes.Equal(got.ServerKey, want.ServerKey) {
				t.Errorf("%s's %s credential on the %s: %+v, %v; want %+v", u.name, u.mech, where, got, ok, want)
			}
		}
	}

	d, err := tn.admin.DescribeUserScramCredentials(ctx(t), &sluicev1.DescribeUserScramCredentialsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := described(d), "alice:NONE[SCRAM-SHA-256/8192 SCRAM-SHA-512/4096] bob:NONE[SCRAM-SHA-512/16384]"; got != want {
		t.Errorf("describe = %s, want %s", got, want)
	}
	// Nothing secret in the answer: no key, no salt.
	raw, _ := proto.Marshal(d)
	for _, u := range []scramUser{alice256, alice512, bob} {
		c, _ := auth.NewScramCredential(u.mech, u.iterations, u.salt, u.salted)
		for what, b := range map[string][]byte{"salt": u.salt, "stored key": c.StoredKey, "server key": c.ServerKey, "salted password": u.salted} {
			if bytes.Contains(raw, b) {
				t.Errorf("the describe answer holds %s's %s %s", u.name, u.mech, what)
			}
		}
	}
	d, err = tn.admin.DescribeUserScramCredentials(ctx(t), &sluicev1.DescribeUserScramCredentialsRequest{Users: []string{"bob", "nobody", "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := described(d), "bob:NONE[SCRAM-SHA-512/16384] nobody:RESOURCE_NOT_FOUND[] alice:NONE[SCRAM-SHA-256/8192 SCRAM-SHA-512/4096]"; got != want {
		t.Errorf("describe named = %s, want %s", got, want)
	}

	// The metadata log (and whatever else the node wrote) holds the keys
	// but never a salted password, in bytes or in base64.
	stored := map[string]bool{}
	walkFiles(t, tn.dir, func(path string, data []byte) {
		for _, u := range []scramUser{alice256, alice512, bob} {
			for _, b := range [][]byte{u.salted, []byte(base64.StdEncoding.EncodeToString(u.salted)), []byte(u.password)} {
				if bytes.Contains(data, b) {
					t.Errorf("%s holds %s's %s salted password or password", path, u.name, u.mech)
				}
			}
			c, _ := auth.NewScramCredential(u.mech, u.iterations, u.salt, u.salted)
			if bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(c.StoredKey))) {
				stored[u.name+" "+string(u.mech)] = true
			}
		}
	})
	if len(stored) != 3 {
		t.Errorf("the stored keys found in the node's files: %v; want all 3 (the search would not find a salted password either)", stored)
	}

	// Deleting: one credential, then the rest; the user is gone.
	resp, err = tn.admin.AlterUserScramCredentials(ctx(t), &sluicev1.AlterUserScramCredentialsRequest{
		Deletions: []*sluicev1.ScramCredentialDeletion{{Name: "alice", Mechanism: string(auth.ScramSHA256)}}})
	if err != nil || results(resp) != "alice:NONE" {
		t.Fatalf("delete alice's SCRAM-SHA-256: %v, %v", resp, err)
	}
	if _, ok := tn.node.Metadata().Image().ScramCredential("alice", string(auth.ScramSHA256)); ok {
		t.Error("alice's SCRAM-SHA-256 credential is still on the broker after its deletion was answered")
	}
	resp, err = tn.admin.AlterUserScramCredentials(ctx(t), &sluicev1.AlterUserScramCredentialsRequest{
		Deletions: []*sluicev1.ScramCredentialDeletion{{Name: "alice", Mechanism: string(auth.ScramSHA512)}, {Name: "bob", Mechanism: string(auth.ScramSHA512)}}})
	if err != nil || results(resp) != "alice:NONE bob:NONE" {
		t.Fatalf("delete the rest: %v, %v", resp, err)
	}
	d, err = tn.admin.DescribeUserScramCredentials(ctx(t), &sluicev1.DescribeUserScramCredentialsRequest{Users: []string{"alice"}})
	if err != nil || described(d) != "alice:RESOURCE_NOT_FOUND[]" {
		t.Errorf("describe alice after her deletion: %s, %v", described(d), err)
	}
	if d, err := tn.admin.DescribeUserScramCredentials(ctx(t), &sluicev1.DescribeUserScramCredentialsRequest{}); err != nil || len(d.Users) != 0 {
		t.Errorf("describe all after the deletions: %s, %v", described(d), err)
	}
}

// walkFiles calls fn with every regular file under dir and its bytes.
func walkFiles(t *testing.T, dir string, fn func(path string, data []byte)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(path, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Each user of a request is answered for itself: a bad credential,
// mechanism or name, a mechanism named twice or a deletion of a
// credential that does not exist refuses that user's every alteration,
// and nothing of it is stored; the other users' are.
func TestUserScramCredentialsRefusedPerUser(t *testing.T) {
	tn := startNode(t, t.TempDir())
	good := func(name string, mech auth.ScramMechanism) *sluicev1.ScramCredentialUpsertion {
		return newScramUser(t, name, mech, 4096).upsertion()
	}
	edit := func(u *sluicev1.ScramCredentialUpsertion, f func(*sluicev1.ScramCredentialUpsertion)) *sluicev1.ScramCredentialUpsertion {
		f(u)
		return u
	}
	req := &sluicev1.AlterUserScramCredentialsRequest{
		Deletions: []*sluicev1.ScramCredentialDeletion{{Name: "ghost", Mechanism: string(auth.ScramSHA256)}},
		Upsertions: []*sluicev1.ScramCredentialUpsertion{
			edit(good("short-salt", auth.ScramSHA256), func(u *sluicev1.ScramCredentialUpsertion) { u.Salt = u.Salt[:15] }),
			edit(good("few-iterations", auth.ScramSHA256), func(u *sluicev1.ScramCredentialUpsertion) { u.Iterations = 4095 }),
			edit(good("many-iterations", auth.ScramSHA512), func(u *sluicev1.ScramCredentialUpsertion) { u.Iterations = 16385 }),
			edit(good("wrong-length", auth.ScramSHA512), func(u *sluicev1.ScramCredentialUpsertion) { u.SaltedPassword = u.SaltedPassword[:32] }),
			edit(good("huge-salt", auth.ScramSHA256), func(u *sluicev1.ScramCredentialUpsertion) { u.Salt = make([]byte, 4096) }),
			edit(good("md5", auth.ScramSHA256), func(u *sluicev1.ScramCredentialUpsertion) { u.Mechanism = "SCRAM-MD5" }),
			good("", auth.ScramSHA256),
			good("tab\tuser", auth.ScramSHA256),
			good(strings.Repeat("x", 256), auth.ScramSHA256),
			good("twice", auth.ScramSHA256),
			good("ok", auth.ScramSHA256),
			good("twice", auth.ScramSHA256),
			good("mixed", auth.ScramSHA512),
			edit(good("mixed", auth.ScramSHA256), func(u *sluicev1.ScramCredentialUpsertion) { u.Iterations = 100 }),
		},
	}
	resp, err := tn.admin.AlterUserScramCredentials(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		user string
		code sluicev1.ErrorCode
		says string
	}{
		{"ghost", sluicev1.ErrorCode_RESOURCE_NOT_FOUND, `user "ghost" has no SCRAM-SHA-256 credential`},
		{"short-salt", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "salt of 15 bytes"},
		{"few-iterations", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "4095 iterations"},
		{"many-iterations", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "16385 iterations"},
		{"wrong-length", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "salted password of 32 bytes"},
		{"huge-salt", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "salt of 4096 bytes"},
		{"md5", sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM, `"SCRAM-MD5" is not served`},
		{"", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "user name is empty"},
		{"tab\tuser", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "control character"},
		{strings.Repeat("x", 256), sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "256 bytes long"},
		{"twice", sluicev1.ErrorCode_INVALID_REQUEST, "SCRAM-SHA-256 is named twice"},
		{"ok", sluicev1.ErrorCode_NONE, ""},
		{"mixed", sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "100 iterations"},
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results, want %d: %s", len(resp.Results), len(want), results(resp))
	}
	for i, w := range want {
		r := resp.Results[i]
		if r.User != w.user || r.ErrorCode != w.code || !strings.Contains(r.ErrorMessage, w.says) {
			t.Errorf("result %d: %q %v %q; want %q %v saying %q", i, r.User, r.ErrorCode, r.ErrorMessage, w.user, w.code, w.says)
		}
	}
	if names := tn.node.Metadata().Image().UserNames(); !reflect.DeepEqual(names, []string{"ok"}) {
		t.Errorf("users stored: %q, want only ok", names)
	}
	if names := tn.node.Controller().Image().UserNames(); !reflect.DeepEqual(names, []string{"ok"}) {
		t.Errorf("users on the controller: %q, want only ok", names)
	}
	// An empty request alters nothing and is answered empty.
	if resp, err := tn.admin.AlterUserScramCredentials(ctx(t), &sluicev1.AlterUserScramCredentialsRequest{}); err != nil || len(resp.Results) != 0 {
		t.Errorf("empty request: %v, %v", resp, err)
	}
}
