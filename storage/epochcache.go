package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the leader-epoch cache (Kafka's LeaderEpochFileCache, KIP-101
// and KIP-279) as a pure value: no files, no locks. The OffsetForLeaderEpoch
// lookup over it is not here: it is one rule for leaders and followers,
// replication.EndOffsetForEpoch (cluster/replication), applied to
// Log.EpochEntries. The Log (epochs.go)
// owns one, persists it in leader-epoch-checkpoint and replaces it under
// its mutex; every method here returns a new cache instead of modifying
// the receiver, so a published cache can be read without copying.

// EpochEntry says that StartOffset is the first offset written under
// leader epoch Epoch.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// UndefinedEpoch is the latest epoch of an empty cache (Kafka's
// UNDEFINED_EPOCH).
const UndefinedEpoch int32 = -1

// epochCache is an ordered list of epoch entries. Invariants (checked by
// valid): epochs are >= 0 and strictly increasing, start offsets are
// strictly increasing. Only the last entry may start at the log end
// offset (an epoch under which nothing is stored any more, left by
// retention or a crash between the checkpoint and the batch write).
type epochCache struct {
	entries []EpochEntry // never modified in place once published
}

// latest is the largest cached epoch, or UndefinedEpoch when empty.
func (c epochCache) latest() int32 {
	if len(c.entries) == 0 {
		return UndefinedEpoch
	}
	return c.entries[len(c.entries)-1].Epoch
}

// checkAppend decides whether a batch of leader epoch epoch may be
// appended at base offset start (the log end offset): a negative epoch is
// INVALID_RECORD (leaders always stamp one), an epoch below the latest is
// FENCED_LEADER_EPOCH (a stale leader, or a follower that has not
// truncated to the divergence point), the latest epoch is fine, and a
// larger one opens a new epoch (isNew). Nothing is written when it
// returns an error.
func (c epochCache) checkAppend(epoch int32, start int64) (isNew bool, err error) {
	if epoch < 0 {
		return false, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "batch at offset %d has no partition leader epoch (%d)", start, epoch)
	}
	latest := c.latest()
	switch {
	case epoch < latest:
		return false, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "batch at offset %d has leader epoch %d, below the log's latest epoch %d", start, epoch, latest)
	case epoch == latest:
		return false, nil
	}
	if n := len(c.entries); n > 0 && start < c.entries[n-1].StartOffset {
		return false, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "epoch %d would start at offset %d, before epoch %d at %d", epoch, start, latest, c.entries[n-1].StartOffset)
	}
	return true, nil
}

// assign returns the cache with epoch starting at start, for an append
// checkAppend accepted as a new epoch. A trailing entry that starts at
// start covers no batch and is replaced (Kafka drops such non-monotonic
// entries the same way).
func (c epochCache) assign(epoch int32, start int64) epochCache {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= start {
		n--
	}
	out := make([]EpochEntry, n, n+1)
	copy(out, c.entries[:n])
	return epochCache{append(out, EpochEntry{Epoch: epoch, StartOffset: start})}
}

// truncateFromEnd drops the entries starting at or after offset: what a
// log truncated to offset no longer holds. changed reports a difference.
func (c epochCache) truncateFromEnd(offset int64) (out epochCache, changed bool) {
	n := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset >= offset })
	if n == len(c.entries) {
		return c, false
	}
	return epochCache{c.entries[:n:n]}, true
}

// truncateFromStart adapts the cache to a log start offset moved up to
// offset (Kafka's truncateFromStart): entries wholly below offset are
// dropped, and the entry holding offset is kept with its start moved up
// to offset, so the epoch of the first stored batch stays known.
func (c epochCache) truncateFromStart(offset int64) (out epochCache, changed bool) {
	// The last entry starting at or before offset covers it.
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset > offset }) - 1
	if i < 0 || (i == 0 && c.entries[0].StartOffset == offset) {
		return c, false
	}
	kept := make([]EpochEntry, len(c.entries)-i)
	copy(kept, c.entries[i:])
	kept[0].StartOffset = offset
	return epochCache{kept}, true
}

// clone returns a copy of the entries for callers outside the package.
func (c epochCache) clone() []EpochEntry {
	return append([]EpochEntry(nil), c.entries...)
}

// valid checks the invariants of the entries.
func (c epochCache) valid() error {
	for i, e := range c.entries {
		if e.Epoch < 0 || e.StartOffset < 0 {
			return fmt.Errorf("entry %d (%d, %d) is negative", i, e.Epoch, e.StartOffset)
		}
		if i > 0 {
			p := c.entries[i-1]
			if e.Epoch <= p.Epoch || e.StartOffset <= p.StartOffset {
				return fmt.Errorf("entry %d (%d, %d) does not follow (%d, %d)", i, e.Epoch, e.StartOffset, p.Epoch, p.StartOffset)
			}
		}
	}
	return nil
}

// epochCheckpointVersion is the version line of leader-epoch-checkpoint.
const epochCheckpointVersion = 0

// encodeEpochCheckpoint renders entries in Kafka's leader-epoch-checkpoint
// text format: a version line (0), a line with the number of entries,
// then one "epoch startOffset" line per entry, in order.
func encodeEpochCheckpoint(c epochCache) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%d\n", epochCheckpointVersion, len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

// decodeEpochCheckpoint parses encodeEpochCheckpoint's format. Anything
// else (unknown version, wrong count, bad numbers, broken invariants,
// trailing lines) is an error: the caller rebuilds the cache from the log.
func decodeEpochCheckpoint(data []byte) (epochCache, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	v, ok := line()
	if !ok || v != strconv.Itoa(epochCheckpointVersion) {
		return epochCache{}, fmt.Errorf("leader epoch checkpoint: unsupported version %q", v)
	}
	cs, ok := line()
	n, err := strconv.Atoi(cs)
	if !ok || err != nil || n < 0 || n > len(data) {
		return epochCache{}, fmt.Errorf("leader epoch checkpoint: bad entry count %q", cs)
	}
	out := make([]EpochEntry, 0, n)
	for i := 0; i < n; i++ {
		l, ok := line()
		f := strings.Fields(l)
		if !ok || len(f) != 2 {
			return epochCache{}, fmt.Errorf("leader epoch checkpoint: entry %d: %q", i, l)
		}
		epoch, err1 := strconv.ParseInt(f[0], 10, 32)
		start, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return epochCache{}, fmt.Errorf("leader epoch checkpoint: entry %d: %q", i, l)
		}
		out = append(out, EpochEntry{Epoch: int32(epoch), StartOffset: start})
	}
	for {
		l, ok := line()
		if !ok {
			break
		}
		if l != "" {
			return epochCache{}, fmt.Errorf("leader epoch checkpoint: trailing %q", l)
		}
	}
	if err := sc.Err(); err != nil {
		return epochCache{}, fmt.Errorf("leader epoch checkpoint: %w", err)
	}
	c := epochCache{out}
	if err := c.valid(); err != nil {
		return epochCache{}, fmt.Errorf("leader epoch checkpoint: %w", err)
	}
	return c, nil
}
