package txn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleRecords has one record of every written state, with every field
// away from its zero value somewhere: several topics and partitions,
// a producer id move pending (NextProducerID) and done (PrevProducerID).
func sampleRecords() []Metadata {
	const t0 = 1794026921817
	tps := []TopicPartition{{Topic: "orders", Partition: 2}, {Topic: "orders", Partition: 0}, {Topic: "payments", Partition: 5}, {Topic: "__consumer_offsets", Partition: 17}}
	return []Metadata{
		{TransactionalID: "u12-txn", ProducerID: 1000, PrevProducerID: 1000, NextProducerID: NoProducerID,
			ProducerEpoch: 0, LastProducerEpoch: NoProducerEpoch, TimeoutMs: 60000, State: Empty,
			StartTimeMs: NoTimestamp, UpdateTimeMs: t0},
		{TransactionalID: "u12-txn", ProducerID: 1000, PrevProducerID: 1000, NextProducerID: NoProducerID,
			ProducerEpoch: 3, LastProducerEpoch: 2, TimeoutMs: 60000, State: Ongoing,
			Partitions: tps, StartTimeMs: t0 + 10, UpdateTimeMs: t0 + 20, ClientVersion: TV2},
		{TransactionalID: "日本語-txn", ProducerID: 1000, PrevProducerID: 1000, NextProducerID: 2001,
			ProducerEpoch: 32767, LastProducerEpoch: 32766, TimeoutMs: 900000, State: PrepareCommit,
			Partitions: tps[:1], StartTimeMs: t0, UpdateTimeMs: t0 + 1, ClientVersion: TV2},
		{TransactionalID: "日本語-txn", ProducerID: 2001, PrevProducerID: 1000, NextProducerID: NoProducerID,
			ProducerEpoch: 0, LastProducerEpoch: 32766, TimeoutMs: 900000, State: CompleteCommit,
			StartTimeMs: t0, UpdateTimeMs: t0 + 2, ClientVersion: TV2},
		{TransactionalID: "fenced", ProducerID: 3000, PrevProducerID: 3000, NextProducerID: NoProducerID,
			ProducerEpoch: 8, LastProducerEpoch: 7, TimeoutMs: 1, State: PrepareAbort,
			Partitions: []TopicPartition{{Topic: "t", Partition: 0}}, StartTimeMs: t0, UpdateTimeMs: t0 + 3, ClientVersion: TV1},
		{TransactionalID: "fenced", ProducerID: 3000, PrevProducerID: 3000, NextProducerID: NoProducerID,
			ProducerEpoch: 8, LastProducerEpoch: 7, TimeoutMs: 1, State: CompleteAbort,
			StartTimeMs: t0, UpdateTimeMs: t0 + 4, ClientVersion: TV1},
		{TransactionalID: "fenced", State: Dead},
	}
}

// normalized is m as DecodeRecord returns it: partitions sorted, none nil.
func normalized(m Metadata) Metadata {
	if m.State == Dead {
		return Metadata{TransactionalID: m.TransactionalID, State: Dead}
	}
	m = m.Clone()
	if len(m.Partitions) == 0 {
		m.Partitions = nil
	}
	m.Partitions = unionPartitions(m.Partitions, nil)
	if len(m.Partitions) == 0 {
		m.Partitions = nil
	}
	return m
}

func TestRecordRoundTrip(t *testing.T) {
	for _, m := range sampleRecords() {
		t.Run(m.TransactionalID+"/"+m.State.String(), func(t *testing.T) {
			key, value, err := EncodeRecord(m)
			if err != nil {
				t.Fatal(err)
			}
			if string(key) != m.TransactionalID {
				t.Errorf("key %q, want the id's UTF-8 bytes", key)
			}
			if (value == nil) != (m.State == Dead) {
				t.Errorf("value %q: a tombstone exactly for Dead", value)
			}
			got, err := DecodeRecord(key, value)
			if err != nil {
				t.Fatal(err)
			}
			if want := normalized(m); !reflect.DeepEqual(got, want) {
				t.Errorf("decoded %+v\nwant    %+v", got, want)
			}
			k2, v2, err := EncodeRecord(got)
			if err != nil || string(k2) != string(key) || string(v2) != string(value) {
				t.Errorf("re-encoding differs: %q %q %v", k2, v2, err)
			}
		})
	}
}

// The golden file pins version 1's bytes: any change to them needs a
// RecordVersion bump and a reader for the old version — or, as for
// client_transaction_version, an optional field whose absence old
// records keep reading right (TestDecodeRecordsWrittenBeforeTV1).
func TestRecordGoldenV1(t *testing.T) {
	var b strings.Builder
	for _, m := range sampleRecords() {
		key, value, err := EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		v := string(value)
		if value == nil {
			v = "<tombstone>"
		}
		b.WriteString(string(key) + "\t" + v + "\n")
	}
	golden(t, "records-v1.golden", []byte(b.String()))
}

// Records written before Sluice knew TV1 (testdata/records-v1-before-
// tv1.golden: the same samples as written then, never regenerated) have
// no client_transaction_version and read as TV2, the only version Sluice
// spoke then; everything else reads as before.
func TestDecodeRecordsWrittenBeforeTV1(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "records-v1-before-tv1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	samples := sampleRecords()
	if len(lines) != len(samples) {
		t.Fatalf("%d old records, %d samples", len(lines), len(samples))
	}
	for i, line := range lines {
		key, value, _ := strings.Cut(line, "\t")
		if value == "<tombstone>" {
			value = ""
		}
		if strings.Contains(value, "client_transaction_version") {
			t.Fatalf("old record %d has the new field: %s", i, value)
		}
		got, err := DecodeRecord([]byte(key), []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		want := normalized(samples[i])
		if want.State != Dead {
			want.ClientVersion = TV2
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d decoded %+v\nwant      %+v", i, got, want)
		}
	}
}

// The version field is written as a number and read back as written,
// 0 (Kafka's TV_0, a new id) included; only its absence means TV2.
func TestRecordClientVersion(t *testing.T) {
	for _, v := range []ClientVersion{0, TV1, TV2} {
		m := sampleRecords()[1]
		m.ClientVersion = v
		_, value, err := EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"client_transaction_version":%d}`, v); !strings.HasSuffix(string(value), want) {
			t.Errorf("%v: value %s does not end with %s", v, value, want)
		}
		got, err := DecodeRecord([]byte(m.TransactionalID), value)
		if err != nil || got.ClientVersion != v {
			t.Errorf("%v: decoded %v, %v", v, got.ClientVersion, err)
		}
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	const good = `{"version":1,"producer_id":1000,"previous_producer_id":1000,"next_producer_id":-1,"producer_epoch":0,"last_producer_epoch":-1,"timeout_ms":60000,"state":"Empty","partitions":[],"start_time_ms":-1,"update_time_ms":5}`
	if _, err := DecodeRecord([]byte("id"), []byte(good)); err != nil {
		t.Fatalf("the well-formed value is refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		key   string
		value string
		want  error
	}{
		{"newer version", "id", `{"version":2,"producer_id":1000,"some_new_field":{"x":1}}`, ErrNewerRecordVersion},
		{"missing version", "id", `{"producer_id":1000,"state":"Empty"}`, ErrCorruptRecord},
		{"version zero", "id", strings.Replace(good, `"version":1`, `"version":0`, 1), ErrCorruptRecord},
		{"not JSON", "id", `{"version":1,`, ErrCorruptRecord},
		{"trailing data", "id", good + `{}`, ErrCorruptRecord},
		{"unknown state", "id", strings.Replace(good, `"Empty"`, `"Paused"`, 1), ErrCorruptRecord},
		{"Dead with a value", "id", strings.Replace(good, `"Empty"`, `"Dead"`, 1), ErrCorruptRecord},
		{"epoch out of int16", "id", strings.Replace(good, `"producer_epoch":0`, `"producer_epoch":40000`, 1), ErrCorruptRecord},
		{"negative partition", "id", strings.Replace(good, `"partitions":[]`, `"partitions":[{"topic":"t","partitions":[-1]}]`, 1), ErrCorruptRecord},
		{"empty topic", "id", strings.Replace(good, `"partitions":[]`, `"partitions":[{"topic":"","partitions":[0]}]`, 1), ErrCorruptRecord},
		{"empty key", "", good, ErrCorruptRecord},
		{"key not UTF-8", "\xff\xfe", good, ErrCorruptRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRecord([]byte(tc.key), []byte(tc.value))
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want one wrapping %v", err, tc.want)
			}
		})
	}
}

// A field a later writer adds as optional within version 1 is ignored.
func TestDecodeRecordIgnoresUnknownFields(t *testing.T) {
	v := `{"version":1,"producer_id":1000,"previous_producer_id":1000,"next_producer_id":-1,"producer_epoch":2,"last_producer_epoch":1,"timeout_ms":60000,"state":"Ongoing","partitions":[{"topic":"t","partitions":[3,1]}],"start_time_ms":7,"update_time_ms":8,"later_field":true}`
	m, err := DecodeRecord([]byte("id"), []byte(v))
	if err != nil {
		t.Fatal(err)
	}
	if want := []TopicPartition{{Topic: "t", Partition: 1}, {Topic: "t", Partition: 3}}; !reflect.DeepEqual(m.Partitions, want) || m.State != Ongoing || m.ProducerEpoch != 2 {
		t.Errorf("decoded %+v", m)
	}
}

func TestEncodeRecordRefuses(t *testing.T) {
	base := sampleRecords()[1]
	for _, tc := range []struct {
		name string
		edit func(*Metadata)
	}{
		{"empty id", func(m *Metadata) { m.TransactionalID = "" }},
		{"id too long", func(m *Metadata) { m.TransactionalID = strings.Repeat("x", MaxTransactionalIDBytes+1) }},
		{"unknown state", func(m *Metadata) { m.State = State(99) }},
		{"negative partition", func(m *Metadata) { m.Partitions = []TopicPartition{{Topic: "t", Partition: -1}} }},
		{"empty topic", func(m *Metadata) { m.Partitions = []TopicPartition{{Topic: "", Partition: 0}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base.Clone()
			tc.edit(&m)
			if k, v, err := EncodeRecord(m); err == nil {
				t.Errorf("encoded %q %q", k, v)
			}
		})
	}
}
