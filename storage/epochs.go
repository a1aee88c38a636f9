package storage

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/sluice-io/sluice/proto/batch"
)

// The Log's use of the leader-epoch cache (epochcache.go): queries,
// persistence in leader-epoch-checkpoint, and loading or rebuilding it
// when the log opens.
//
// Ordering rule: the checkpoint is written (durably) before the log bytes
// it describes change. An append opening a new epoch writes the checkpoint
// with the new entry first, and a truncation writes the truncated
// checkpoint first. A crash in between leaves a checkpoint that is at most
// one step ahead of the log: either an entry starting at the log end
// offset (harmless, see epochCache) or one missing entries for batches
// still in the log, which Open detects (the last batch's epoch is not the
// latest cached one) and repairs by a rebuild.

const epochCheckpointFile = "leader-epoch-checkpoint"

// LatestEpoch is the largest leader epoch of the batches in the log (more
// exactly: of the epoch cache, which keeps the epoch of a log emptied by
// retention), or -1 when none is known.
func (l *Log) LatestEpoch() int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.epochs.latest()
}

// EpochEntries returns a copy of the epoch cache in epoch order, for
// tests and tools.
func (l *Log) EpochEntries() []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.epochs.clone()
}

// writeEpochs durably replaces leader-epoch-checkpoint with c.
func (l *Log) writeEpochs(c epochCache) error {
	return WriteFileAtomic(filepath.Join(l.dir, epochCheckpointFile), encodeEpochCheckpoint(c))
}

// loadEpochs sets l.epochs when the log opens, after recover: from the
// checkpoint, adapted to the recovered log (entries past the log end
// offset dropped, the first moved up to the log start offset), when what
// is left agrees with the batches on disk; otherwise rebuilt from the
// batch headers. The checkpoint is rewritten when the result differs from
// the file. Open calls it before the log is shared, so it takes no locks.
func (l *Log) loadEpochs() error {
	path := filepath.Join(l.dir, epochCheckpointFile)
	data, err := os.ReadFile(path)
	var c epochCache
	ok := false
	if err == nil {
		if c, err = decodeEpochCheckpoint(data); err == nil {
			end := l.active().next
			// Entries past the log end describe batches that a crash
			// (or crash recovery) removed; an entry at the end covers no
			// batch and is kept.
			n := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset > end })
			c = epochCache{c.entries[:n:n]}
			c, _ = c.truncateFromStart(l.startOffset)
			ok = l.epochsMatchLog(c)
		}
	}
	if !ok {
		c = l.scanEpochs()
	}
	l.epochs = c
	if data == nil && len(c.entries) == 0 {
		return nil // no file means empty, too; the first epoch writes it
	}
	if string(encodeEpochCheckpoint(c)) != string(data) {
		return l.writeEpochs(c)
	}
	return nil
}

// epochsMatchLog checks c against the stored batches cheaply (a few
// header reads): every entry starting inside the log names a batch of its
// epoch starting there (the first entry: the batch holding the log start
// offset), and the last batch has the latest epoch among the entries
// starting at or before it. An empty log must have at most one entry.
func (l *Log) epochsMatchLog(c epochCache) bool {
	start, end := l.startOffset, l.active().next
	if start == end {
		return len(c.entries) <= 1
	}
	if len(c.entries) == 0 || c.entries[0].StartOffset != start {
		return false
	}
	last := epochCache{}
	for i, e := range c.entries {
		if e.StartOffset >= end {
			break // only the last entry may, and it covers no batch
		}
		h, ok := l.batchHolding(e.StartOffset)
		if !ok || h.PartitionLeaderEpoch != e.Epoch || (i > 0 && h.BaseOffset != e.StartOffset) {
			return false
		}
		last.entries = c.entries[:i+1]
	}
	h, ok := l.batchHolding(end - 1)
	return ok && h.PartitionLeaderEpoch == last.latest()
}

// scanEpochs rebuilds the cache from the headers of the stored batches
// (one header read per batch, no record is read): each batch whose epoch
// exceeds the latest so far opens an entry at its base offset. Negative
// epochs and epochs lower than an earlier batch's (which this log refuses
// to write, but older logs may hold) open nothing. A frame that cannot be
// parsed (corruption in a sealed segment that a clean shutdown let
// recovery trust) ends the scan of its segment: reads of it fail anyway,
// and the log must still open.
func (l *Log) scanEpochs() epochCache {
	var c epochCache
	for _, s := range l.segments {
		if s.next <= l.startOffset {
			continue
		}
		for pos := int64(0); pos < s.size; {
			h, n, err := s.peek(pos, s.size)
			if err != nil {
				break
			}
			if h.PartitionLeaderEpoch > c.latest() && h.NextOffset() > l.startOffset {
				c = c.assign(h.PartitionLeaderEpoch, h.BaseOffset)
			}
			pos += int64(n)
		}
	}
	c, _ = c.truncateFromStart(l.startOffset)
	return c
}

// batchHolding returns the header of the stored batch holding offset
// (base <= offset <= last); false when offset is outside the segments'
// batches. The caller holds appendMu or runs before the log is shared.
func (l *Log) batchHolding(offset int64) (batch.Header, bool) {
	i, pos, ok := l.locate(offset)
	if !ok {
		return batch.Header{}, false
	}
	h, _, err := l.segments[i].peek(pos, l.segments[i].size)
	return h, err == nil
}

// locate finds the segment and file position of the batch holding offset
// by the offset index and header reads. The caller holds appendMu or runs
// before the log is shared.
func (l *Log) locate(offset int64) (seg int, pos int64, ok bool) {
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	if i < 0 || offset >= l.segments[i].next {
		return 0, 0, false
	}
	s := l.segments[i]
	for pos = lookupIndex(s.index, uint32(offset-s.base)); pos < s.size; {
		h, n, err := s.peek(pos, s.size)
		if err != nil || h.BaseOffset > offset {
			return 0, 0, false
		}
		if h.LastOffset() >= offset {
			return i, pos, true
		}
		pos += int64(n)
	}
	return 0, 0, false
}
