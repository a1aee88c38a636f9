package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestKafkaCodesMatchKafkasNames checks kafkaCode against franz-go's
// table of Kafka's errors: every Sluice code maps to the Kafka number of
// the error of the same name (two names differ: Kafka's
// CORRUPT_MESSAGE and NOT_LEADER_FOR_PARTITION).
func TestKafkaCodesMatchKafkasNames(t *testing.T) {
	aliases := map[string]string{"CORRUPT_RECORD": "CORRUPT_MESSAGE", "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION"}
	checked := 0
	for num, name := range sluicev1.ErrorCode_name {
		c := sluicev1.ErrorCode(num)
		k := kafkaCode(c)
		if c == sluicev1.ErrorCode_NONE {
			if k != 0 {
				t.Errorf("NONE maps to %d", k)
			}
			continue
		}
		ke, ok := kerr.ErrorForCode(k).(*kerr.Error)
		if !ok {
			t.Errorf("%s (%d) maps to Kafka code %d, which franz-go does not know", name, num, k)
			continue
		}
		want := name
		if a, ok := aliases[name]; ok {
			want = a
		}
		if ke.Message != want && !strings.EqualFold(ke.Message, want) {
			t.Errorf("%s (%d) maps to Kafka code %d, which is Kafka's %s", name, num, k, ke.Message)
		}
		checked++
	}
	if checked < 50 {
		t.Fatalf("checked only %d codes", checked)
	}
}

// TestDoorOnlyCodes checks the Kafka codes the door answers that Sluice's
// table has no value for.
func TestDoorOnlyCodes(t *testing.T) {
	for code, want := range map[int16]*kerr.Error{
		codeUnsupportedVersion: kerr.UnsupportedVersion, codeUnsupportedForMessageFmt: kerr.UnsupportedForMessageFormat,
		codeCorruptMessage: kerr.CorruptMessage, codeUnknownTopicOrPartition: kerr.UnknownTopicOrPartition,
		codeUnknownTopicID: kerr.UnknownTopicID, codeUnsupportedEndpointType: kerr.UnsupportedEndpointType,
		codeFetchSessionIDNotFound: kerr.FetchSessionIDNotFound, codeInvalidFetchSessionEpoch: kerr.InvalidFetchSessionEpoch,
	} {
		if code != want.Code {
			t.Errorf("%s is %d, not %d", want.Message, want.Code, code)
		}
	}
}
