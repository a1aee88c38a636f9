package batch

import "testing"

func TestMarkerRoundTrip(t *testing.T) {
	b := MarkerBatch(Producer{ID: 9, Epoch: 4, BaseSequence: 17}, ControlAbort, 12, 500)
	h, err := Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	if !h.IsControl() || !h.IsTransactional() || h.ProducerID != 9 || h.ProducerEpoch != 4 || h.BaseSequence != -1 || h.RecordCount != 1 {
		t.Fatalf("header %+v", h)
	}
	n := 0
	err = ForEachRecord(b, func(r Record) error {
		n++
		typ, epoch, err := ParseMarker(r.Key, r.Value)
		if err != nil || typ != ControlAbort || epoch != 12 {
			t.Errorf("marker %v epoch %d err %v; want ABORT 12", typ, epoch, err)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("%d records, %v", n, err)
	}
}

func TestParseMarkerRefusesWhatIsNotAMarker(t *testing.T) {
	good := MarkerValue(1)
	for name, c := range map[string]struct{ key, value []byte }{
		"short key":       {[]byte{0, 0}, good},
		"short value":     {ControlRecordKey(ControlCommit), []byte{0, 0, 0}},
		"key version 1":   {[]byte{0, 1, 0, 1}, good},
		"unknown type":    {ControlRecordKey(ControlType(5)), good},
		"value version 1": {ControlRecordKey(ControlCommit), []byte{0, 1, 0, 0, 0, 1}},
	} {
		if _, _, err := ParseMarker(c.key, c.value); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
