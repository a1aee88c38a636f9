package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
)

// Client quotas (issue 33; Kafka's ClientQuotaRecord, KIP-13, KIP-124,
// KIP-546). The metadata log holds them so that every broker has them
// from its metadata stream; each broker enforces them on its own traffic
// (package auth's quota manager, rebuilt when Image.QuotasVersion moves).
// This package only stores them.
//
// A quota is an (entity, key, value): the entity is a user, a client id or
// both, each a name or the default of its type; the key one of QuotaKeys.
// One ClientQuota record carries every change to one entity, so that an
// AlterClientQuotas entry is applied whole or not at all.

// The quota keys (Kafka's names).
const (
	// QuotaProducerByteRate is the bytes per second of produced batches
	// a broker accepts from the entity before throttling it.
	QuotaProducerByteRate = "producer_byte_rate"
	// QuotaConsumerByteRate is the bytes per second of fetched batches.
	QuotaConsumerByteRate = "consumer_byte_rate"
	// QuotaRequestPercentage is the time spent handling the entity's
	// requests, in percent of one request thread.
	QuotaRequestPercentage = "request_percentage"
)

// QuotaKeys are the keys a quota may have, in the order lists show them.
var QuotaKeys = []string{QuotaProducerByteRate, QuotaConsumerByteRate, QuotaRequestPercentage}

// Bounds of the quotas the metadata holds.
const (
	// MaxClientQuotas bounds the (entity, key) quotas of a cluster:
	// every broker holds them all.
	MaxClientQuotas = 100_000
	// MaxQuotaNameLength bounds a user name or client id of an entity.
	MaxQuotaNameLength = 1024
	// MaxRequestPercentage bounds request_percentage: a hundred request
	// threads' worth.
	MaxRequestPercentage = 10_000
)

// QuotaName is one component of a QuotaEntity: a name, or the default of
// its type. Its zero value is the component's absence.
type QuotaName struct {
	Name    string `json:"name,omitempty"`
	Default bool   `json:"default,omitempty"`
}

// Present reports whether the entity has the component.
func (n QuotaName) Present() bool { return n.Name != "" || n.Default }

// String writes n as kafka-configs does: the name, or <default>.
func (n QuotaName) String() string {
	if n.Default {
		return "<default>"
	}
	return n.Name
}

// QuotaEntity is what a quota applies to: User and/or ClientID. It is a
// comparable value.
type QuotaEntity struct {
	User     QuotaName `json:"user,omitzero"`
	ClientID QuotaName `json:"client_id,omitzero"`
}

// String writes e for logs and errors: "user=alice,client-id=<default>".
func (e QuotaEntity) String() string {
	var parts []string
	if e.User.Present() {
		parts = append(parts, "user="+e.User.String())
	}
	if e.ClientID.Present() {
		parts = append(parts, "client-id="+e.ClientID.String())
	}
	return strings.Join(parts, ",")
}

func compareQuotaNames(a, b QuotaName) int {
	// Absent, then default, then names.
	rank := func(n QuotaName) int {
		switch {
		case !n.Present():
			return 0
		case n.Default:
			return 1
		}
		return 2
	}
	return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Name, b.Name))
}

func compareQuotaEntities(a, b QuotaEntity) int {
	return cmp.Or(compareQuotaNames(a.User, b.User), compareQuotaNames(a.ClientID, b.ClientID))
}

// QuotaOp sets (Value) or removes (Remove) one quota of an entity.
type QuotaOp struct {
	Key    string  `json:"key"`
	Value  float64 `json:"value,omitempty"`
	Remove bool    `json:"remove,omitempty"`
}

// ClientQuota changes the quotas of one entity (Kafka's
// ClientQuotaRecord, one per entity here): each op sets or removes one
// key. The FSM refuses the whole record when an op is invalid
// (checkQuotaAlteration: INVALID_REQUEST) or when it would take the
// cluster beyond MaxClientQuotas; removing a quota not held is a no-op.
// (Added to version 1 as a new type: a voter or broker that does not know
// it must not apply a log that holds it.)
type ClientQuota struct {
	Entity QuotaEntity `json:"entity"`
	Ops    []QuotaOp   `json:"ops"`
}

// Type implements Record.
func (ClientQuota) Type() RecordType { return TypeClientQuota }

// QuotaKey is one quota's place in the image: an entity and a key.
type QuotaKey struct {
	Entity QuotaEntity
	Key    string
}

// QuotaMap is the image's quotas. Values are scalars: a copy of the map
// is a deep copy. It is encoded in JSON as an array ordered by entity and
// key, so equal maps encode to equal bytes.
type QuotaMap map[QuotaKey]float64

type quotaEntry struct {
	Entity QuotaEntity `json:"entity"`
	Key    string      `json:"key"`
	Value  float64     `json:"value"`
}

// MarshalJSON implements json.Marshaler.
func (m QuotaMap) MarshalJSON() ([]byte, error) {
	out := make([]quotaEntry, 0, len(m))
	for k, v := range m {
		out = append(out, quotaEntry{k.Entity, k.Key, v})
	}
	slices.SortFunc(out, func(a, b quotaEntry) int {
		return cmp.Or(compareQuotaEntities(a.Entity, b.Entity), strings.Compare(a.Key, b.Key))
	})
	return json.Marshal(out)
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *QuotaMap) UnmarshalJSON(data []byte) error {
	var list []quotaEntry
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	*m = make(QuotaMap, len(list))
	for _, e := range list {
		(*m)[QuotaKey{e.Entity, e.Key}] = e.Value
	}
	return nil
}

// EntityQuotas is one entity's quotas, by key.
type EntityQuotas struct {
	Entity QuotaEntity
	Values map[string]float64
}

// QuotaList returns the image's quotas grouped by entity, ordered by
// entity (user, then client id; absent before default before names).
// The slice and maps are the caller's.
func (im *Image) QuotaList() []EntityQuotas {
	by := map[QuotaEntity]map[string]float64{}
	for k, v := range im.ClientQuotas {
		if by[k.Entity] == nil {
			by[k.Entity] = map[string]float64{}
		}
		by[k.Entity][k.Key] = v
	}
	out := make([]EntityQuotas, 0, len(by))
	for e, vals := range by {
		out = append(out, EntityQuotas{Entity: e, Values: vals})
	}
	slices.SortFunc(out, func(a, b EntityQuotas) int { return compareQuotaEntities(a.Entity, b.Entity) })
	return out
}

// checkQuotaName: a name or the default, not both; a name is UTF-8
// without control characters, at most MaxQuotaNameLength bytes.
func checkQuotaName(kind string, n QuotaName) error {
	switch {
	case n.Default && n.Name != "":
		return invalid("the %s is both %q and the default", kind, errs.Echo(n.Name))
	case len(n.Name) > MaxQuotaNameLength:
		return invalid("%s %q is %d bytes long, at most %d", kind, errs.Echo(n.Name), len(n.Name), MaxQuotaNameLength)
	case !utf8.ValidString(n.Name):
		return invalid("%s %q is not UTF-8", kind, errs.Echo(n.Name))
	}
	for _, c := range n.Name {
		if unicode.IsControl(c) {
			return invalid("%s %q has the control character %U", kind, errs.Echo(n.Name), c)
		}
	}
	return nil
}

// checkQuotaAlteration is the FSM's check of a ClientQuota (Kafka's
// ClientQuotaControlManager checks): an entity with a component, known
// keys each named once, values positive and finite, request_percentage
// at most MaxRequestPercentage. Errors are INVALID_REQUEST.
func checkQuotaAlteration(r ClientQuota) error {
	if !r.Entity.User.Present() && !r.Entity.ClientID.Present() {
		return invalid("the quota entity names neither a user nor a client id")
	}
	if err := checkQuotaName("user", r.Entity.User); err != nil {
		return err
	}
	if err := checkQuotaName("client id", r.Entity.ClientID); err != nil {
		return err
	}
	if len(r.Ops) == 0 {
		return invalid("no quota to set or remove for %s", r.Entity)
	}
	seen := map[string]bool{}
	for _, op := range r.Ops {
		if !slices.Contains(QuotaKeys, op.Key) {
			return invalid("quota key %q: a quota's is one of %s", errs.Echo(op.Key), strings.Join(QuotaKeys, ", "))
		}
		if seen[op.Key] {
			return invalid("quota key %s is named twice for %s", op.Key, r.Entity)
		}
		seen[op.Key] = true
		if op.Remove {
			continue
		}
		switch v := op.Value; {
		case math.IsNaN(v) || math.IsInf(v, 0) || v <= 0:
			return invalid("%s of %s is %v: a quota is positive (remove it to lift it)", op.Key, r.Entity, v)
		case op.Key == QuotaRequestPercentage && v > MaxRequestPercentage:
			return invalid("%s of %s is %v, at most %d", op.Key, r.Entity, v, MaxRequestPercentage)
		}
	}
	return nil
}

// quotaGrowth is how many quotas r adds to im.
func quotaGrowth(im *Image, r ClientQuota) int {
	n := 0
	for _, op := range r.Ops {
		if _, held := im.ClientQuotas[QuotaKey{r.Entity, op.Key}]; !held && !op.Remove {
			n++
		}
	}
	return n
}

// quotaChanges reports whether applying r changes im.
func quotaChanges(im *Image, r ClientQuota) bool {
	for _, op := range r.Ops {
		v, held := im.ClientQuotas[QuotaKey{r.Entity, op.Key}]
		if op.Remove && held || !op.Remove && (!held || v != op.Value) {
			return true
		}
	}
	return false
}

func tooManyQuotas(n int) error {
	return invalid("the cluster holds %d quotas, the most it keeps: remove some first (defaults cover more with fewer)", n)
}

func applyClientQuota(im *Image, r ClientQuota, offset uint64) error {
	if err := checkQuotaAlteration(r); err != nil {
		return err
	}
	if !quotaChanges(im, r) {
		return nil
	}
	if g := quotaGrowth(im, r); g > 0 && len(im.ClientQuotas)+g > MaxClientQuotas {
		return tooManyQuotas(len(im.ClientQuotas))
	}
	for _, op := range r.Ops {
		k := QuotaKey{r.Entity, op.Key}
		if op.Remove {
			delete(im.ClientQuotas, k)
		} else {
			im.ClientQuotas[k] = op.Value
		}
	}
	im.QuotasVersion = offset
	return nil
}

// planQuotaAlterations decides, from im, what AlterClientQuotas proposes
// (pure): perEntry[i] is why entries[i] is refused, and recordOf[i] the
// index in records of its ClientQuota, or -1 (refused, or a no-op).
// An entity named by two entries is refused the second time.
func planQuotaAlterations(im *Image, entries []ClientQuota) (perEntry []error, records []Record, recordOf []int) {
	perEntry = make([]error, len(entries))
	recordOf = make([]int, len(entries))
	seen := map[QuotaEntity]bool{}
	n := len(im.ClientQuotas)
	for i, r := range entries {
		recordOf[i] = -1
		if perEntry[i] = checkQuotaAlteration(r); perEntry[i] != nil {
			continue
		}
		if seen[r.Entity] {
			perEntry[i] = invalid("the entity %s is named twice", r.Entity)
			continue
		}
		seen[r.Entity] = true
		if !quotaChanges(im, r) {
			continue
		}
		if g := quotaGrowth(im, r); g > 0 && n+g > MaxClientQuotas {
			perEntry[i] = tooManyQuotas(n)
			continue
		}
		n += quotaGrowth(im, r)
		recordOf[i] = len(records)
		records = append(records, r)
	}
	return perEntry, records, recordOf
}

// AlterClientQuotas applies entries, one per entity (planQuotaAlterations
// on the leader's image after a barrier; the FSM checks each record
// again). perEntry[i] is entries[i]'s outcome: nil when applied (or
// already in force), else an INVALID_REQUEST *errs.Error. With
// validateOnly nothing is proposed. offset is the metadata offset that
// holds every change made. err is set when the call failed as a whole
// (NOT_CONTROLLER, ctx): then an entry may or may not have been applied.
func (c *Controller) AlterClientQuotas(ctx context.Context, entries []ClientQuota, validateOnly bool) (perEntry []error, offset uint64, err error) {
	return c.proposePlanned(ctx, func(im *Image) ([]error, []Record, []int) {
		perEntry, recs, recordOf := planQuotaAlterations(im, entries)
		if validateOnly {
			recs = nil // checked against the image, nothing proposed
		}
		return perEntry, recs, recordOf
	}, func(r Record) {
		c.log.Info("controller: client quotas altered", "entity", r.(ClientQuota).Entity.String())
	})
}
