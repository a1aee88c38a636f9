package txn

// Replay folds one __transaction_state record into txns, the coordinator's
// view of one partition it is loading (it became leader: DESIGN §10
// failover). Records must be replayed in log order from the log start
// (compaction keeps at least the last record of every id); the last
// record of an id wins and a tombstone removes the id. txns must not be
// nil. On error (DecodeRecord's: ErrNewerRecordVersion, ErrCorruptRecord)
// txns is unchanged. The caller decides: a corrupt record was not written
// by a coordinator and may be skipped (reported); a record of a newer
// version is an id's latest state, and skipping it would resume an older
// one, so the partition must not be served.
//
// After the last record, every id whose Metadata.PendingMarkers holds
// had its Prepare* written by an earlier leader: the new coordinator
// sends its markers (coordinator epoch = its own leader epoch) and then
// calls Complete. An id found Ongoing keeps its start time, so its timeout
// still applies.
func Replay(txns map[string]*Metadata, key, value []byte) error {
	m, err := DecodeRecord(key, value)
	if err != nil {
		return err
	}
	if m.State == Dead {
		delete(txns, m.TransactionalID)
		return nil
	}
	txns[m.TransactionalID] = &m
	return nil
}
