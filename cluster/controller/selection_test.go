package controller

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// An admin request about partitions that do not exist is refused, never
// answered "0 partitions moved" (issue 28).
func TestPartitionSelectionCheck(t *testing.T) {
	im := build(t, tenPartitions()...) // topic "p", partitions 0..9
	for _, tc := range []struct {
		sel  PartitionSelection
		want string // "" = accepted
	}{
		{nil, ""},
		{PartitionSelection{}, ""},
		{PartitionSelection{"p": nil}, ""},
		{PartitionSelection{"p": {0, 9}}, ""},
		{PartitionSelection{"nosuch": nil}, `topic "nosuch" does not exist`},
		{PartitionSelection{"p": {10}}, `topic "p" has no partition 10 (its partitions are 0..9)`},
		{PartitionSelection{"p": {-1}}, `has no partition -1`},
		{PartitionSelection{"p": {1}, "a": nil}, `topic "a" does not exist`},
	} {
		err := tc.sel.Check(im)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.sel, err)
			}
			continue
		}
		if errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION || !strings.Contains(errs.Message(err), tc.want) {
			t.Errorf("%v: err %v, want UNKNOWN_TOPIC_OR_PARTITION %q", tc.sel, err, tc.want)
		}
	}
	sel := PartitionSelection{"p": {3}, "q": nil}
	if !sel.Selects("p", 3) || sel.Selects("p", 4) || !sel.Selects("q", 7) || sel.Selects("r", 0) || !PartitionSelection(nil).Selects("r", 0) {
		t.Error("Selects")
	}
}
