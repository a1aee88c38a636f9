package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSplicedFetchAnswerIsKmsgs: for every served Fetch version, the
// spliced answer writes the same bytes kmsg encodes with the batches in
// place — empty, small and large (a multi-byte length prefix) batches,
// several topics and partitions.
func TestSplicedFetchAnswerIsKmsgs(t *testing.T) {
	payloads := [][]byte{bytes.Repeat([]byte{1}, 3), bytes.Repeat([]byte{2}, 300), bytes.Repeat([]byte{3}, 70000), nil, {4}}
	for v := handlers[1].min; v <= handlers[1].max; v++ {
		build := func(sp *spliced) *kmsg.FetchResponse {
			resp := kmsg.NewPtrFetchResponse()
			resp.Version = v
			k := 0
			for _, name := range []string{"a", "bb"} {
				rt := kmsg.NewFetchResponseTopic()
				rt.Topic = name
				for p := range 3 {
					if k >= len(payloads) {
						break
					}
					pr := kmsg.NewFetchResponseTopicPartition()
					pr.Partition, pr.HighWatermark = int32(p), int64(k)
					pr.RecordBatches = payloads[k]
					if sp != nil && len(pr.RecordBatches) > 0 {
						pr.RecordBatches = sp.add(pr.RecordBatches)
					}
					rt.Partitions = append(rt.Partitions, pr)
					k++
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp
		}
		req := &request{key: 1, version: v, correlationID: 42}
		want := appendResponse(nil, req, build(nil))
		sp := &spliced{}
		sp.Response = build(sp)
		bufs, err := sp.frame(appendResponse(nil, req, sp.Response), sp.IsFlexible())
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		var got bytes.Buffer
		bufs.WriteTo(&got)
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("v%d: spliced answer differs (%d bytes, want %d)", v, got.Len(), len(want))
		}
	}
}
