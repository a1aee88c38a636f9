package node

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// NodeIDFromName derives a node id from a name ending in "-<ordinal>", the
// way a Kubernetes StatefulSet names its pods (sluice-0, sluice-1, ...):
// the id is ordinal + offset. It is what sluiced --node-id-from-name does,
// so that every pod of one StatefulSet can run the same command line with
// the pod name from the downward API (docs/kubernetes.md).
//
// The offset keeps ids apart when several StatefulSets make one cluster
// (controllers 1.., brokers 100..) and keeps them above 0, which the
// controller protocol reads as "no leader". It errs when name has no
// ordinal suffix or the id is not in 0..MaxInt32.
func NodeIDFromName(name string, offset int) (int32, error) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return 0, fmt.Errorf("name %q does not end in -<ordinal> (a StatefulSet pod name such as sluice-0)", name)
	}
	ord, err := strconv.ParseUint(name[i+1:], 10, 31)
	if err != nil {
		return 0, fmt.Errorf("name %q does not end in -<ordinal> (a StatefulSet pod name such as sluice-0)", name)
	}
	id := int64(ord) + int64(offset)
	if id < 0 || id > math.MaxInt32 {
		return 0, fmt.Errorf("node id %d (ordinal %d of %q + offset %d) is out of range", id, ord, name, offset)
	}
	return int32(id), nil
}
