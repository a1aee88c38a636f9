package node_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 32: a SCRAM credential stored through a broker that is no
// controller goes to the active controller, is on that broker's image
// when the answer comes and reaches every broker by the metadata stream;
// a broker that restarts gets it back with the rest of the metadata.
func TestScramCredentialsReachEveryBroker(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1}, true, []int32{2})
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	salt := auth.NewSalt()
	salted, err := auth.SaltPassword(auth.ScramSHA512, "secret", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	want, err := auth.NewScramCredential(auth.ScramSHA512, 4096, salt, salted)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sluicev1.NewAdminClient(c.Dial(2)).AlterUserScramCredentials(ctx, &sluicev1.AlterUserScramCredentialsRequest{
		Upsertions: []*sluicev1.ScramCredentialUpsertion{{Name: "alice", Mechanism: string(auth.ScramSHA512), Iterations: 4096, Salt: salt, SaltedPassword: salted}}})
	if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("alter through broker 2: %v, %v", resp, err)
	}
	wantCred := controller.ScramCredential{Iterations: 4096, Salt: salt, StoredKey: want.StoredKey, ServerKey: want.ServerKey}
	credentialOn := func(id int32) error {
		got, ok := c.Node(id).Metadata().Image().ScramCredential("alice", string(auth.ScramSHA512))
		if !ok || !reflect.DeepEqual(got, wantCred) {
			return fmt.Errorf("node %d: alice's credential %+v, %v", id, got, ok)
		}
		return nil
	}
	if err := credentialOn(2); err != nil {
		t.Fatalf("when the answer came: %v", err)
	}
	wait.For(t, 10*time.Second, "alice's credential on broker 1", func() error { return credentialOn(1) })
	d, err := sluicev1.NewAdminClient(c.Dial(1)).DescribeUserScramCredentials(ctx, &sluicev1.DescribeUserScramCredentialsRequest{})
	if err != nil || len(d.Users) != 1 || d.Users[0].User != "alice" || len(d.Users[0].Credentials) != 1 || d.Users[0].Credentials[0].Iterations != 4096 {
		t.Errorf("describe on broker 1: %v, %v", d, err)
	}

	if err := c.Stop(2); err != nil {
		t.Fatal(err)
	}
	c.Restart(2)
	if err := credentialOn(2); err != nil {
		t.Errorf("after a restart: %v", err)
	}
}
