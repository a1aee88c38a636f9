package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

var (
	alice        = QuotaEntity{User: QuotaName{Name: "alice"}}
	aliceApp     = QuotaEntity{User: QuotaName{Name: "alice"}, ClientID: QuotaName{Name: "app"}}
	userDefault  = QuotaEntity{User: QuotaName{Default: true}}
	clientDefaul = QuotaEntity{ClientID: QuotaName{Default: true}}
)

func setQuota(e QuotaEntity, key string, v float64) ClientQuota {
	return ClientQuota{Entity: e, Ops: []QuotaOp{{Key: key, Value: v}}}
}

func TestClientQuotaRecordEncoding(t *testing.T) {
	data, err := EncodeRecord(ClientQuota{Entity: QuotaEntity{User: QuotaName{Name: "alice"}, ClientID: QuotaName{Default: true}},
		Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 1024}, {Key: QuotaRequestPercentage, Remove: true}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"ClientQuota","version":1,"entity":{"user":{"name":"alice"},"client_id":{"default":true}},` +
		`"ops":[{"key":"producer_byte_rate","value":1024},{"key":"request_percentage","remove":true}]}`
	if string(data) != want {
		t.Errorf("encoded\n%s\nwant\n%s", data, want)
	}
}

// The FSM's checks of a ClientQuota (Kafka's ClientQuotaControlManager):
// known keys once each, positive finite values, request_percentage
// bounded, an entity with a valid component.
func TestApplyClientQuotaRules(t *testing.T) {
	cases := []struct {
		name    string
		rec     ClientQuota
		bad     bool
		changes bool
	}{
		{name: "a user's producer rate", rec: setQuota(QuotaEntity{User: QuotaName{Name: "bob"}}, QuotaProducerByteRate, 1e6), changes: true},
		{name: "a user's client's", rec: setQuota(aliceApp, QuotaConsumerByteRate, 10), changes: true},
		{name: "the default client id", rec: setQuota(clientDefaul, QuotaRequestPercentage, 50), changes: true},
		{name: "a fractional rate", rec: setQuota(alice, QuotaConsumerByteRate, 0.5), changes: true},
		{name: "the value in force changes nothing", rec: setQuota(alice, QuotaProducerByteRate, 1024)},
		{name: "a new value", rec: setQuota(alice, QuotaProducerByteRate, 2048), changes: true},
		{name: "a removal", rec: ClientQuota{Entity: alice, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Remove: true}}}, changes: true},
		{name: "the removal of a quota not held changes nothing", rec: ClientQuota{Entity: userDefault, Ops: []QuotaOp{{Key: QuotaConsumerByteRate, Remove: true}}}},
		{name: "the bound of request_percentage", rec: setQuota(alice, QuotaRequestPercentage, MaxRequestPercentage), changes: true},

		{name: "no component", rec: setQuota(QuotaEntity{}, QuotaProducerByteRate, 1), bad: true},
		{name: "a name and the default", rec: setQuota(QuotaEntity{User: QuotaName{Name: "a", Default: true}}, QuotaProducerByteRate, 1), bad: true},
		{name: "a name too long", rec: setQuota(QuotaEntity{ClientID: QuotaName{Name: strings.Repeat("c", MaxQuotaNameLength+1)}}, QuotaProducerByteRate, 1), bad: true},
		{name: "a name with a newline", rec: setQuota(QuotaEntity{User: QuotaName{Name: "a\nb"}}, QuotaProducerByteRate, 1), bad: true},
		{name: "a name not UTF-8", rec: setQuota(QuotaEntity{User: QuotaName{Name: "a\xff"}}, QuotaProducerByteRate, 1), bad: true},
		{name: "an unknown key", rec: setQuota(alice, "controller_mutation_rate", 1), bad: true},
		{name: "a key named twice", rec: ClientQuota{Entity: alice, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 1}, {Key: QuotaProducerByteRate, Remove: true}}}, bad: true},
		{name: "no op", rec: ClientQuota{Entity: alice}, bad: true},
		{name: "zero", rec: setQuota(alice, QuotaProducerByteRate, 0), bad: true},
		{name: "negative", rec: setQuota(alice, QuotaProducerByteRate, -1), bad: true},
		{name: "NaN", rec: setQuota(alice, QuotaProducerByteRate, math.NaN()), bad: true},
		{name: "infinite", rec: setQuota(alice, QuotaProducerByteRate, math.Inf(1)), bad: true},
		{name: "request_percentage beyond the bound", rec: setQuota(alice, QuotaRequestPercentage, MaxRequestPercentage+1), bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := build(t, setQuota(alice, QuotaProducerByteRate, 1024))
			im := base.Clone()
			_, err := Apply(im, tc.rec, 100)
			if tc.bad {
				if errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
					t.Fatalf("err %v, want INVALID_REQUEST", err)
				}
				if !reflect.DeepEqual(im.ClientQuotas, base.ClientQuotas) {
					t.Error("a refused record changed the quotas")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed := im.QuotasVersion == 100; changed != tc.changes {
				t.Errorf("version %d: changed %v, want %v", im.QuotasVersion, changed, tc.changes)
			}
			for _, op := range tc.rec.Ops {
				v, held := im.ClientQuotas[QuotaKey{tc.rec.Entity, op.Key}]
				if op.Remove == held || !op.Remove && v != op.Value {
					t.Errorf("%s: held %v value %v after %+v", op.Key, held, v, op)
				}
			}
		})
	}
}

// An entry is applied whole or not at all: a bad op refuses the others.
func TestClientQuotaRecordIsAllOrNothing(t *testing.T) {
	im := build(t)
	_, err := Apply(im, ClientQuota{Entity: alice, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 5}, {Key: "bogus", Value: 1}}}, 9)
	if err == nil || len(im.ClientQuotas) != 0 {
		t.Fatalf("err %v, quotas %v", err, im.ClientQuotas)
	}
}

func TestClientQuotaBeyondMaxClientQuotas(t *testing.T) {
	im := build(t)
	for i := range MaxClientQuotas {
		im.ClientQuotas[QuotaKey{QuotaEntity{ClientID: QuotaName{Name: fmt.Sprint(i)}}, QuotaProducerByteRate}] = 1
	}
	if _, err := Apply(im, setQuota(alice, QuotaProducerByteRate, 1), 5); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Errorf("a new quota beyond the bound: %v", err)
	}
	// Changing one held is not growth.
	if _, err := Apply(im, setQuota(QuotaEntity{ClientID: QuotaName{Name: "0"}}, QuotaProducerByteRate, 2), 6); err != nil {
		t.Errorf("a change at the bound: %v", err)
	}
}

func TestClientQuotasInClonesEditsAndSnapshots(t *testing.T) {
	im := build(t, setQuota(alice, QuotaProducerByteRate, 1024), setQuota(userDefault, QuotaConsumerByteRate, 2048),
		setQuota(aliceApp, QuotaRequestPercentage, 25))
	c := im.Clone()
	if !reflect.DeepEqual(c, im) || c.QuotasVersion != 3 {
		t.Fatalf("the clone differs, or version %d is not 3", c.QuotasVersion)
	}
	delete(c.ClientQuotas, QuotaKey{alice, QuotaProducerByteRate})
	if len(im.ClientQuotas) != 3 {
		t.Error("changing the clone changed the image")
	}

	// The editor copies the map before a change and only then.
	e := EditImage(im)
	if _, err := e.Apply(setQuota(alice, QuotaProducerByteRate, 1024), 10); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(e.Image().ClientQuotas).Pointer() != reflect.ValueOf(im.ClientQuotas).Pointer() {
		t.Error("a no-op record copied the quotas")
	}
	if _, err := e.Apply(setQuota(alice, QuotaProducerByteRate, 1), 11); err != nil {
		t.Fatal(err)
	}
	if im.ClientQuotas[QuotaKey{alice, QuotaProducerByteRate}] != 1024 || e.Image().ClientQuotas[QuotaKey{alice, QuotaProducerByteRate}] != 1 {
		t.Error("the edit changed the original, or did not change its copy")
	}

	data, err := EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	other := build(t, setQuota(aliceApp, QuotaRequestPercentage, 25), setQuota(userDefault, QuotaConsumerByteRate, 2048),
		setQuota(alice, QuotaProducerByteRate, 1024))
	if data2, _ := EncodeSnapshot(other); string(data2) != string(data) {
		t.Errorf("the same quotas encode differently:\n%s\n%s", data, data2)
	}
	if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im) {
		t.Errorf("round trip: %v", err)
	}
	data, _ = EncodeSnapshot(build(t, withTopic()...))
	if strings.Contains(string(data), `"client_quotas`) {
		t.Errorf("snapshot %s names quotas", data)
	}
	var f struct {
		Image struct {
			ClientQuotas json.RawMessage `json:"client_quotas"`
		} `json:"image"`
	}
	data, _ = EncodeSnapshot(im)
	if err := json.Unmarshal(data, &f); err != nil || !strings.HasPrefix(string(f.Image.ClientQuotas), `[{"entity":{"user":{"default":true}}`) {
		t.Errorf("snapshot quotas %s (%v): want the user default first", f.Image.ClientQuotas, err)
	}
}

func TestQuotaListGroupsByEntity(t *testing.T) {
	im := build(t, setQuota(aliceApp, QuotaRequestPercentage, 25), setQuota(alice, QuotaProducerByteRate, 1024),
		setQuota(alice, QuotaConsumerByteRate, 7), setQuota(clientDefaul, QuotaConsumerByteRate, 3))
	got := im.QuotaList()
	want := []EntityQuotas{
		{clientDefaul, map[string]float64{QuotaConsumerByteRate: 3}},
		{alice, map[string]float64{QuotaProducerByteRate: 1024, QuotaConsumerByteRate: 7}},
		{aliceApp, map[string]float64{QuotaRequestPercentage: 25}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestPlanQuotaAlterations(t *testing.T) {
	im := build(t, setQuota(alice, QuotaProducerByteRate, 1024))
	per, recs, recordOf := planQuotaAlterations(im, []ClientQuota{
		setQuota(alice, QuotaProducerByteRate, 1024), // in force: no record
		setQuota(userDefault, QuotaProducerByteRate, 0),
		setQuota(aliceApp, QuotaConsumerByteRate, 5),
		setQuota(aliceApp, QuotaProducerByteRate, 5), // the entity again
	})
	if per[0] != nil || per[1] == nil || per[2] != nil || per[3] == nil {
		t.Errorf("outcomes %v", per)
	}
	if len(recs) != 1 || !reflect.DeepEqual(recordOf, []int{-1, -1, 0, -1}) {
		t.Errorf("records %v, recordOf %v", recs, recordOf)
	}
}

func TestControllerAlterClientQuotas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads, cluster bootstrapped", func() error {
		if im := c.Image(); !c.IsLeader() || im.ClusterID == "" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	entries := []ClientQuota{setQuota(alice, QuotaProducerByteRate, 1024), setQuota(alice, "bogus", 1)}
	per, offset, err := c.AlterClientQuotas(ctx, entries[:1], true)
	if err != nil || per[0] != nil || len(c.Image().ClientQuotas) != 0 {
		t.Fatalf("validate only: %v %v, quotas %v", per, err, c.Image().ClientQuotas)
	}
	per, offset, err = c.AlterClientQuotas(ctx, entries, false)
	if err != nil || per[0] != nil || per[1] == nil {
		t.Fatalf("alter: %v %v", per, err)
	}
	im := c.Image()
	if im.ClientQuotas[QuotaKey{alice, QuotaProducerByteRate}] != 1024 || im.QuotasVersion != offset || offset == 0 {
		t.Errorf("quotas %v, version %d, offset %d", im.ClientQuotas, im.QuotasVersion, offset)
	}
	per, _, err = c.AlterClientQuotas(ctx, []ClientQuota{{Entity: alice, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Remove: true}}}}, false)
	if err != nil || per[0] != nil || len(c.Image().ClientQuotas) != 0 {
		t.Errorf("remove: %v %v, quotas %v", per, err, c.Image().ClientQuotas)
	}
}
