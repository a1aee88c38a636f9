package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// parseAcks maps the --acks spellings to client.Acks.
func parseAcks(s string) (client.Acks, error) {
	switch s {
	case "all", "-1":
		return client.AcksAll, nil
	case "1", "leader":
		return client.AcksLeader, nil
	case "0", "none":
		return client.AcksNone, nil
	}
	return 0, fmt.Errorf("--acks must be all, 1 or 0, got %q", s)
}

// produceFlags are produce's options once checked.
type produceFlags struct {
	acks          client.Acks
	transactional string
	commitEvery   int
	abort         bool
	txnTimeout    time.Duration
}

// checkProduceFlags checks the flags that depend on each other: the
// transaction flags need --transactional-id, which needs acks=all.
func checkProduceFlags(acksFlag, transactionalID string, commitEvery int, abort bool, txnTimeout time.Duration, txnTimeoutSet bool) (produceFlags, error) {
	acks, err := parseAcks(acksFlag)
	if err != nil {
		return produceFlags{}, err
	}
	f := produceFlags{acks: acks, transactional: transactionalID, commitEvery: commitEvery, abort: abort, txnTimeout: txnTimeout}
	if transactionalID == "" {
		switch {
		case commitEvery != 0:
			return f, fmt.Errorf("--commit-every needs --transactional-id")
		case abort:
			return f, fmt.Errorf("--abort needs --transactional-id")
		case txnTimeoutSet:
			return f, fmt.Errorf("--transaction-timeout needs --transactional-id")
		}
		return f, nil
	}
	if acks != client.AcksAll {
		return f, fmt.Errorf("--transactional-id needs --acks all (a transactional producer is idempotent), got --acks %s", acksFlag)
	}
	if commitEvery < 0 {
		return f, fmt.Errorf("--commit-every must be >= 0, got %d", commitEvery)
	}
	if txnTimeout < time.Millisecond {
		return f, fmt.Errorf("--transaction-timeout must be at least 1ms, got %v", txnTimeout)
	}
	return f, nil
}

// produce sends one record per stdin line and exits once every record is
// acknowledged. At the first record that fails (refused at once, as one
// larger than the topic's max.message.bytes or --max-request-bytes, or by
// the broker) it reads no further, flushes what was sent and fails saying
// how many records were acknowledged, which record failed and, for one too
// large, what would let it through. With --transactional-id
// the records are sent in transactions, committed (or, with --abort,
// aborted) every --commit-every records and at the end.
func (e *env) produce(ctx context.Context, args []string) error {
	fs := e.newFlags("produce", "produce TOPIC [--partition P] [--key-separator S] [--acks all|1|0] [--compression C]\n              [--transactional-id ID [--commit-every N] [--abort] [--transaction-timeout D]]\n\nReads one record per line from stdin (the key is the text before the\nseparator when --key-separator is given) and exits once all are acknowledged.\nWith --transactional-id the records are written in transactions: committed\nevery --commit-every records and at the end of the input, or aborted with\n--abort (read_committed consumers then never see them).")
	fs.StringVar(&e.g.clientID, "client-id", "", "client id sent with every request (Kafka's client.id), which client quotas may name")
	partition := fs.Int("partition", -1, "partition to produce to (-1: by key hash, sticky when keyless)")
	keySep := fs.String("key-separator", "", "split each line into key and value at the first occurrence of this string")
	acksFlag := fs.String("acks", "all", "acknowledgement: all, 1 (leader) or 0 (none); transactions need all")
	maxLine := fs.Int("max-line-bytes", 16<<20, "longest accepted input line")
	maxRequest := fs.Int("max-request-bytes", 4<<20, "largest produce request, and so largest record, the client sends (max.request.size; the topic's max.message.bytes is the broker's limit)")
	delivery := fs.Duration("delivery-timeout", 30*time.Second, "give up on a record not acknowledged within this time (retries included)")
	txnID := fs.String("transactional-id", "", "send the records in transactions under this transactional id (fences any other producer using it)")
	commitEvery := fs.Int("commit-every", 0, "end the transaction after every N records and begin the next (0: one transaction for all input)")
	abort := fs.Bool("abort", false, "abort each transaction instead of committing it (to see read_committed hide the records)")
	txnTimeout := fs.Duration("transaction-timeout", client.DefaultTransactionTimeout, "the coordinator aborts a transaction left open longer than this")
	compression := fs.String("compression", "none", "compress batches with none, gzip, snappy, lz4 or zstd (stored as sent unless the topic's compression.type converts them)")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	topic := pos[0]
	txnTimeoutSet := false
	fs.Visit(func(f *flag.Flag) { txnTimeoutSet = txnTimeoutSet || f.Name == "transaction-timeout" })
	if *maxLine < 1 {
		return fmt.Errorf("produce: --max-line-bytes must be at least 1, got %d", *maxLine)
	}
	pf, err := checkProduceFlags(*acksFlag, *txnID, *commitEvery, *abort, *txnTimeout, txnTimeoutSet)
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	codec, err := client.ParseCompression(*compression)
	if err != nil {
		return fmt.Errorf("produce: --compression: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	// The topic's metadata first, under the same bound as a record's
	// wait for it: when no broker is reachable the command ends as soon
	// as the client gives up, and the topic's max.message.bytes and
	// replicas are known for the report of a record too large.
	mctx, cancel := context.WithTimeout(ctx, min(*delivery, e.g.timeout))
	md, err := c.Metadata(mctx, topic)
	cancel()
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	lim := sizeLimits{maxRequest: *maxRequest}
	for _, t := range md.Topics {
		switch {
		case t.Name != topic:
		case t.ErrorCode == sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:
			// Before any input is read (topics are not auto-created).
			return fmt.Errorf("produce: topic %q: %w", topic, &errs.Error{Code: t.ErrorCode, Message: t.ErrorMessage})
		case t.ErrorCode == sluicev1.ErrorCode_NONE && len(t.Partitions) > 0:
			lim.partitions, lim.replicas = len(t.Partitions), len(t.Partitions[0].Replicas)
		}
	}
	// A record waits for its topic's metadata (retrying unreachable or
	// starting brokers) at most one request timeout, and never past its
	// delivery timeout: not the library's 60 s max block.
	opts := []client.ProducerOption{client.WithAcks(pf.acks), client.WithDeliveryTimeout(*delivery),
		client.WithMaxBlock(min(*delivery, e.g.timeout)), client.WithMaxRequestBytes(*maxRequest),
		client.WithBatchBytes(min(1<<20, *maxRequest)), client.WithCompression(codec)}
	if pf.transactional != "" {
		opts = append(opts, client.WithTransactionalID(pf.transactional), client.WithTransactionTimeout(pf.txnTimeout))
	}
	p, err := c.NewProducer(opts...)
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	defer p.Close()
	defer e.reportThrottle("produce", p.Throttled)
	txn := &txnRun{p: p, abort: pf.abort, on: pf.transactional != ""}
	if err := txn.start(ctx); err != nil {
		return fmt.Errorf("produce: %w", err)
	}

	var (
		mu    sync.Mutex // guards the following: callbacks run on the producer's goroutines
		first *failedRecord
		acked int
	)
	failed := func() *failedRecord {
		mu.Lock()
		defer mu.Unlock()
		return first
	}

	sc := bufio.NewScanner(e.stdin)
	// bufio takes the larger of the buffer's capacity and the maximum.
	sc.Buffer(make([]byte, 0, min(1<<20, *maxLine+1)), *maxLine+1) // +1: the newline
	sep := []byte(*keySep)
	sent := 0
	for sc.Scan() {
		line := sc.Bytes()
		r := client.Record{Topic: topic, Partition: int32(*partition), Value: line}
		if len(sep) > 0 {
			if k, v, ok := bytes.Cut(line, sep); ok {
				r.Key, r.Value = k, v
			}
		}
		n, size := sent+1, len(line)
		p.Send(ctx, r, func(_ client.RecordMetadata, err error) { // Send copies key and value
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				acked++
			case first == nil || n < first.n:
				first = &failedRecord{n: n, size: size, err: err}
			}
		})
		sent++
		// A record refused at once (too large: its callback ran in Send)
		// or an earlier one failed: no more input is read or sent.
		if failed() != nil {
			break
		}
		txn.records++
		if pf.commitEvery > 0 && txn.records == pf.commitEvery {
			if err := txn.next(ctx); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
		}
	}
	scanErr := sc.Err()
	if errors.Is(scanErr, bufio.ErrTooLong) {
		scanErr = fmt.Errorf("line %d is longer than %d bytes (raise --max-line-bytes)", sent+1, *maxLine)
	}
	var endErr error
	// Input that could not be read to its end is not committed: the
	// transaction holding its first part is aborted, as after a failed
	// record.
	if failed() == nil && scanErr == nil {
		endErr = txn.end(ctx)
	} else {
		endErr = txn.abandon(ctx)
	}
	flushErr := p.Flush(ctx)
	closeErr := p.Close()
	mu.Lock()
	fr, nacked := first, acked
	mu.Unlock()
	// The unreadable input is the cause: records of the transaction it
	// aborted fail because of it.
	if scanErr != nil {
		if txn.on {
			return fmt.Errorf("produce: reading stdin: %w (the open transaction, with the %d records read before it, was aborted; %d transactions ended before)", scanErr, txn.records, txn.ended)
		}
		return fmt.Errorf("produce: reading stdin: %w (%d of the %d records before it were acknowledged)", scanErr, nacked, sent)
	}
	if fr != nil {
		done := plural(nacked, "record") + " acknowledged"
		if txn.on {
			done = fmt.Sprintf("the open transaction was aborted (%s %s before it)", plural(txn.ended, "transaction"), map[bool]string{true: "aborted", false: "committed"}[txn.abort])
		}
		return fmt.Errorf("produce: %s; record %d (line %d, %s) %s", done, fr.n, fr.n, humanBytes(fr.size), lim.explain(fr.err))
	}
	if endErr != nil {
		return fmt.Errorf("produce: %w", endErr)
	}
	if flushErr != nil {
		return fmt.Errorf("produce: %d of %d records acknowledged: %w", nacked, sent, flushErr)
	}
	if txn.on {
		fmt.Fprintf(e.stderr, "%s %d transactions (%d records)\n", map[bool]string{true: "aborted", false: "committed"}[txn.abort], txn.ended, sent)
	}
	return closeErr
}

// failedRecord is the first record of the input that failed.
type failedRecord struct {
	n    int // its place in the input, from 1: its line
	size int // the line's bytes
	err  error
}

// sizeLimits is what produce knows of the limits on a record's size, for
// advice that works when one is too large.
type sizeLimits struct {
	maxRequest int // --max-request-bytes
	// The topic's partitions and replicas, 0 when its metadata did not
	// say: for the command that creates a topic like it.
	partitions, replicas int
}

// explain says why a record failed and, when it is too large, what would
// let it through: the limit that binds is named, and only the flag or
// config that can raise it (a topic's max.message.bytes is fixed when the
// topic is created; raising --max-request-bytes past it would not help).
func (l sizeLimits) explain(err error) string {
	var tl *client.RecordTooLargeError
	switch {
	case errors.As(err, &tl) && tl.OverTopicLimit():
		what := fmt.Sprintf("exceeds the topic's max.message.bytes (%s)", humanBytes(tl.MaxMessageBytes))
		if tl.Size > storage.MaxMessageBytesLimit {
			return fmt.Sprintf("%s, and no topic takes records over %s: split the record", what, humanBytes(storage.MaxMessageBytesLimit))
		}
		want := suggestBytes(tl.Size, storage.MaxMessageBytesLimit)
		create := fmt.Sprintf("sluice topic create NAME --partitions %d --config max.message.bytes=%d", max(l.partitions, 1), want)
		if l.replicas > 0 {
			create = fmt.Sprintf("sluice topic create NAME --partitions %d --replication-factor %d --config max.message.bytes=%d", max(l.partitions, 1), l.replicas, want)
		}
		flag := ""
		if tl.Size > l.maxRequest {
			flag = fmt.Sprintf(" and --max-request-bytes %d", suggestBytes(tl.Size, 64<<20))
		}
		return fmt.Sprintf("%s: split the record, or produce it to a topic created with a larger limit (%q%s; a topic's max.message.bytes cannot be changed once it is created)", what, create, flag)
	case errors.As(err, &tl):
		what := fmt.Sprintf("exceeds --max-request-bytes (%s): raise --max-request-bytes, e.g. --max-request-bytes %d", humanBytes(tl.MaxRequestBytes), suggestBytes(tl.Size, 64<<20))
		if tl.MaxMessageBytes > 0 {
			return fmt.Sprintf("%s (the topic's max.message.bytes takes up to %s)", what, humanBytes(tl.MaxMessageBytes))
		}
		return what + " (up to the topic's max.message.bytes)"
	case errs.Code(err) == sluicev1.ErrorCode_MESSAGE_TOO_LARGE:
		// The broker refused it although the client let it through (its
		// metadata did not give the topic's limit, or its batch did not
		// fit): its message names the limit.
		return fmt.Sprintf("was refused: %v: split the record, or produce it to a topic created with a larger max.message.bytes (sluice topic create NAME --config max.message.bytes=N)", err)
	}
	return fmt.Sprintf("failed: %v", err)
}

// suggestBytes returns a limit that takes size bytes: size rounded up to
// a whole MiB, at most ceiling.
func suggestBytes(size, ceiling int) int {
	return min((size+1<<20-1)/(1<<20)*(1<<20), ceiling)
}

// humanBytes writes n bytes for people: "512 bytes", "2.9 KiB", "5.0 MiB".
func humanBytes(n int) string {
	switch {
	case n < 1<<10:
		return plural(n, "byte")
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// txnRun drives produce's transactions; with on false every method is a
// no-op.
type txnRun struct {
	p       *client.Producer
	on      bool
	abort   bool // end with AbortTransaction
	records int  // records sent in the open transaction
	ended   int  // transactions committed (or aborted, with abort)
}

// start initializes the producer's transactions and begins the first.
func (t *txnRun) start(ctx context.Context) error {
	if !t.on {
		return nil
	}
	if err := t.p.InitTransactions(ctx); err != nil {
		return err
	}
	return t.p.BeginTransaction()
}

// next ends the open transaction and begins the next.
func (t *txnRun) next(ctx context.Context) error {
	if err := t.end(ctx); err != nil {
		return err
	}
	return t.p.BeginTransaction()
}

// end commits (or aborts) the open transaction. A transaction that cannot
// be committed (abortable error) is aborted and its error returned.
func (t *txnRun) end(ctx context.Context) error {
	if !t.on {
		return nil
	}
	var err error
	if t.abort {
		// Written first, then aborted: the records are in the log (a
		// read_uncommitted consumer sees them), hidden from read_committed.
		if err = t.p.Flush(ctx); err == nil {
			err = t.p.AbortTransaction(ctx)
		}
	} else {
		err = t.p.CommitTransaction(ctx)
	}
	var abortable *client.TransactionAbortableError
	if errors.As(err, &abortable) {
		if aerr := t.p.AbortTransaction(ctx); aerr != nil {
			return fmt.Errorf("%w (and aborting it failed: %v)", err, aerr)
		}
		return fmt.Errorf("transaction %d aborted: %w", t.ended+1, err)
	}
	if err != nil {
		return fmt.Errorf("transaction %d: %w", t.ended+1, err)
	}
	if t.records > 0 || t.ended == 0 {
		t.ended++ // not the empty one left open after the last --commit-every
	}
	t.records = 0
	return nil
}

// abandon aborts the open transaction after a record failed (best effort:
// the record's error is the one reported).
func (t *txnRun) abandon(ctx context.Context) error {
	if t.on {
		_ = t.p.AbortTransaction(ctx)
	}
	return nil
}
