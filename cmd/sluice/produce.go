package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
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
// acknowledged, failing on the first record error. With --transactional-id
// the records are sent in transactions, committed (or, with --abort,
// aborted) every --commit-every records and at the end.
func (e *env) produce(ctx context.Context, args []string) error {
	fs := e.newFlags("produce", "produce TOPIC [--partition P] [--key-separator S] [--acks all|1|0]\n              [--transactional-id ID [--commit-every N] [--abort] [--transaction-timeout D]]\n\nReads one record per line from stdin (the key is the text before the\nseparator when --key-separator is given) and exits once all are acknowledged.\nWith --transactional-id the records are written in transactions: committed\nevery --commit-every records and at the end of the input, or aborted with\n--abort (read_committed consumers then never see them).")
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
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	// A record waits for its topic's metadata (retrying unreachable or
	// starting brokers) at most one request timeout, and never past its
	// delivery timeout: not the library's 60 s max block.
	opts := []client.ProducerOption{client.WithAcks(pf.acks), client.WithDeliveryTimeout(*delivery),
		client.WithMaxBlock(min(*delivery, e.g.timeout)), client.WithMaxRequestBytes(*maxRequest),
		client.WithBatchBytes(min(1<<20, *maxRequest))}
	if pf.transactional != "" {
		opts = append(opts, client.WithTransactionalID(pf.transactional), client.WithTransactionTimeout(pf.txnTimeout))
	}
	p, err := c.NewProducer(opts...)
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	defer p.Close()
	txn := &txnRun{p: p, abort: pf.abort, on: pf.transactional != ""}
	if err := txn.start(ctx); err != nil {
		return fmt.Errorf("produce: %w", err)
	}

	var mu sync.Mutex
	var firstErr error
	acked := 0
	cb := func(_ client.RecordMetadata, err error) {
		mu.Lock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if err == nil {
			acked++
		}
		mu.Unlock()
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}

	sc := bufio.NewScanner(e.stdin)
	// bufio takes the larger of the buffer's capacity and the maximum.
	sc.Buffer(make([]byte, 0, min(1<<20, *maxLine+1)), *maxLine+1) // +1: the newline
	sep := []byte(*keySep)
	sent := 0
	for sc.Scan() {
		if err := failed(); err != nil {
			break
		}
		line := sc.Bytes()
		r := client.Record{Topic: topic, Partition: int32(*partition), Value: line}
		if len(sep) > 0 {
			if k, v, ok := bytes.Cut(line, sep); ok {
				r.Key, r.Value = k, v
			}
		}
		p.Send(ctx, r, cb) // Send copies key and value
		sent++
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
	// The unreadable input is the cause: records of the transaction it
	// aborted fail because of it.
	if scanErr != nil {
		if txn.on {
			return fmt.Errorf("produce: reading stdin: %w (the open transaction, with the %d records read before it, was aborted; %d transactions ended before)", scanErr, txn.records, txn.ended)
		}
		return fmt.Errorf("produce: reading stdin: %w (%d of the %d records before it were acknowledged)", scanErr, acked, sent)
	}
	if err := failed(); err != nil {
		if errs.Code(err) == sluicev1.ErrorCode_MESSAGE_TOO_LARGE && strings.Contains(err.Error(), "max request bytes") {
			return fmt.Errorf("produce: %w (raise --max-request-bytes, up to the topic's max.message.bytes)", err)
		}
		return fmt.Errorf("produce: %w", err)
	}
	if endErr != nil {
		return fmt.Errorf("produce: %w", endErr)
	}
	if flushErr != nil {
		return fmt.Errorf("produce: %d of %d records acknowledged: %w", acked, sent, flushErr)
	}
	if txn.on {
		fmt.Fprintf(e.stderr, "%s %d transactions (%d records)\n", map[bool]string{true: "aborted", false: "committed"}[txn.abort], txn.ended, sent)
	}
	return closeErr
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
