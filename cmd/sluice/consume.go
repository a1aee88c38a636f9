package main

import (
	"bufio"
	"context"
	"encoding/json"
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

// recordJSON is one record in "consume --output json".
type recordJSON struct {
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp int64             `json:"timestamp"`
	Key       *string           `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers,omitempty"`
}

func (e *env) consume(ctx context.Context, args []string) error {
	fs := e.newFlags("consume", "consume TOPIC [--partition P | --group G] [--from-beginning | --offset O] [--max-messages N]\n              [--timeout D] [--isolation read_committed|read_uncommitted] [--print-offsets] [--print-keys]\n\nPrints one record value per line. Starts at the latest offset unless told\notherwise; reads every partition unless --partition is given. With --group,\njoins the consumer group, reads the partitions the group assigns it from the\ngroup's committed offsets (--from-beginning: the earliest offset where none\nis committed), and commits the offsets of the records it printed.")
	fs.StringVar(&e.g.clientID, "client-id", "", "client id sent with every request (Kafka's client.id), which client quotas may name")
	partition := fs.Int("partition", -1, "partition to read (-1: all)")
	group := fs.String("group", "", "consume as a member of this consumer group (excludes --partition and --offset)")
	instanceID := fs.String("group-instance-id", "", "with --group: a static member id (group.instance.id); a restart within the session timeout keeps the assignment")
	sessionTimeout := fs.Duration("session-timeout", 0, "with --group: the member is fenced after this long without a heartbeat (0: the broker's default, 45s)")
	fromBeginning := fs.Bool("from-beginning", false, "start at the earliest offset")
	offset := fs.Int64("offset", -1, "start at this offset (with --partition)")
	maxMessages := fs.Int("max-messages", 0, "stop after this many records (0: no limit)")
	timeout := fs.Duration("timeout", 0, "stop once no record has arrived for this long (0: never)")
	isolation := fs.String("isolation", "read_committed", "read_committed or read_uncommitted")
	printOffsets := fs.Bool("print-offsets", false, "prefix each value with partition:offset and a tab")
	printKeys := fs.Bool("print-keys", false, "prefix each value with its key and a tab")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	topic := pos[0]
	iso, err := parseIsolation(*isolation)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	offsetSet, partitionSet := false, false
	fs.Visit(func(f *flag.Flag) {
		offsetSet = offsetSet || f.Name == "offset"
		partitionSet = partitionSet || f.Name == "partition"
	})
	if partitionSet && *partition < 0 {
		return fmt.Errorf("consume: --partition must be 0 or more, got %d (leave it out to read every partition)", *partition)
	}
	if offsetSet && *offset < 0 {
		return fmt.Errorf("consume: --offset must be 0 or more, got %d (--from-beginning starts at the earliest offset; without either, consume starts at the latest)", *offset)
	}
	if offsetSet && *partition < 0 && *group == "" {
		return fmt.Errorf("consume: --offset needs --partition (an offset means something in one partition only)")
	}
	if *fromBeginning && offsetSet {
		return fmt.Errorf("consume: --from-beginning and --offset exclude each other")
	}
	if *group != "" {
		var conflict []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "partition" || f.Name == "offset" {
				conflict = append(conflict, "--"+f.Name)
			}
		})
		if len(conflict) > 0 {
			return fmt.Errorf("consume: %s cannot be used with --group (the group assigns the partitions and starts them at its committed offsets)", strings.Join(conflict, " and "))
		}
	}
	if *group == "" && (*instanceID != "" || *sessionTimeout != 0) {
		return fmt.Errorf("consume: --group-instance-id and --session-timeout need --group")
	}
	if *sessionTimeout < 0 {
		return fmt.Errorf("consume: --session-timeout must not be negative, got %v", *sessionTimeout)
	}
	start := client.OffsetLatest
	if *fromBeginning {
		start = client.OffsetEarliest
	} else if offsetSet {
		start = *offset
	}

	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	var nparts int32 = -1
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.ErrorCode != sluicev1.ErrorCode_NONE {
				return fmt.Errorf("consume: topic %q: %w", topic, &errs.Error{Code: t.ErrorCode, Message: t.ErrorMessage})
			}
			nparts = int32(len(t.Partitions))
		}
	}
	if nparts < 0 {
		return fmt.Errorf("consume: topic %q: not in the metadata response", topic)
	}
	var parts []int32
	if *group != "" {
		// The group assigns the partitions.
	} else if *partition >= 0 {
		if int32(*partition) >= nparts {
			return fmt.Errorf("consume: topic %q: %w", topic, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "no partition %d (the topic has %d)", *partition, nparts))
		}
		parts = []int32{int32(*partition)}
	} else {
		for p := int32(0); p < nparts; p++ {
			parts = append(parts, p)
		}
	}

	opts := []client.ConsumerOption{client.WithIsolation(iso), client.WithMaxWait(500 * time.Millisecond)}
	var gc *groupCommitter
	if *group != "" {
		reset := client.OffsetLatest
		if *fromBeginning {
			reset = client.OffsetEarliest
		}
		gc = &groupCommitter{printed: map[client.TopicPartition]int64{}}
		// Auto-commit would commit positions past records fetched but
		// not printed (--max-messages, an interrupt): commit what was
		// printed instead, as it goes, before a revocation, and at the end.
		opts = append(opts, client.WithGroup(*group), client.WithAutoOffsetReset(reset), client.WithAutoCommit(false, 0),
			client.WithRebalanceListener(client.RebalanceCallbacks{Revoked: gc.revoked}))
		if *instanceID != "" {
			opts = append(opts, client.WithInstanceID(*instanceID))
		}
		if *sessionTimeout > 0 {
			opts = append(opts, client.WithSessionTimeout(*sessionTimeout))
		}
	}
	co, err := c.NewConsumer(opts...)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer co.Close()
	defer e.reportThrottle("consume", co.Throttled)
	if gc != nil {
		gc.co = co
		if err := co.Subscribe(topic); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		// Commit what was printed before Close leaves the group.
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), e.g.timeout)
			defer cancel()
			if err := gc.commit(cctx, nil); err != nil {
				fmt.Fprintf(e.stderr, "sluice: consume: committing the offsets of the printed records: %v\n", err)
			}
		}()
	}
	for _, p := range parts {
		if err := co.Assign(topic, p, start); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
	}

	w := bufio.NewWriterSize(e.stdout, 256<<10)
	defer w.Flush()
	enc := json.NewEncoder(w)
	printed := 0
	atEnd := func() bool {
		if gc != nil {
			parts = parts[:0]
			for _, tp := range co.Assignment() {
				parts = append(parts, tp.Partition)
			}
			if len(parts) == 0 {
				return false
			}
		}
		for _, p := range parts {
			pos, ok := co.Position(topic, p)
			hw := co.HighWatermark(topic, p)
			if !ok || hw < 0 || pos < hw {
				return false
			}
		}
		return true
	}
	var lastErr error
	// --timeout counts from the last record (or the start), across
	// retried errors too.
	deadline := time.Now().Add(*timeout)
	for *maxMessages == 0 || printed < *maxMessages {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		pollEnd := time.Time{}
		if *timeout > 0 {
			pollEnd = deadline
		}
		if gc != nil && (pollEnd.IsZero() || time.Until(pollEnd) > time.Second) {
			// A group member wakes at least every second to commit
			// what it printed, records or not.
			pollEnd = time.Now().Add(time.Second)
		}
		if !pollEnd.IsZero() {
			pctx, cancel = context.WithDeadline(ctx, pollEnd)
		}
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil &&
			(*timeout == 0 || time.Now().Before(deadline)) {
			err, recs = nil, nil // only the commit wake-up
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break // --timeout with no new record
			}
			if ctx.Err() != nil {
				break // interrupted
			}
			if errors.Is(err, client.ErrPartitionOffline) {
				// No broker can serve the partition until an operator
				// fixes a disk: say so now instead of retrying.
				w.Flush()
				return fmt.Errorf("consume: %w", err)
			}
			if code := errs.Code(err); errs.Retriable(code) && code != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION || isTransport(err) {
				lastErr = err
				if *timeout > 0 && !time.Now().Before(deadline) {
					break
				}
				continue // retried in the background; --timeout bounds it
			}
			w.Flush()
			return fmt.Errorf("consume: %w", err)
		}
		lastErr = nil
		if len(recs) > 0 {
			deadline = time.Now().Add(*timeout)
		}
		for _, r := range recs {
			if *maxMessages > 0 && printed >= *maxMessages {
				break
			}
			if e.g.json() {
				jr := recordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Value: string(r.Value)}
				if r.Key != nil {
					k := string(r.Key)
					jr.Key = &k
				}
				if len(r.Headers) > 0 {
					jr.Headers = map[string]string{}
					for _, h := range r.Headers {
						jr.Headers[h.Key] = string(h.Value)
					}
				}
				if err := enc.Encode(jr); err != nil {
					return fmt.Errorf("consume: %w", err)
				}
			} else {
				if *printOffsets {
					fmt.Fprintf(w, "%d:%d\t", r.Partition, r.Offset)
				}
				if *printKeys {
					w.Write(r.Key)
					w.WriteByte('\t')
				}
				w.Write(r.Value)
				w.WriteByte('\n')
			}
			printed++
			if gc != nil {
				gc.printedRecord(r)
			}
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("consume: writing output: %w", err)
		}
		if gc != nil && time.Since(gc.last) >= time.Second {
			gc.last = time.Now()
			if err := gc.commit(ctx, nil); err != nil && ctx.Err() == nil {
				fmt.Fprintf(e.stderr, "sluice: consume: commit: %v (retried with the next records)\n", err)
			}
		}
	}
	if printed > 0 || atEnd() {
		return nil
	}
	if lastErr != nil {
		return fmt.Errorf("consume: no records: %w", lastErr)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("consume: interrupted before any record")
	}
	if err := co.Stalled(); err != nil {
		return fmt.Errorf("consume: no record within %v; still retrying: %w", *timeout, err)
	}
	return fmt.Errorf("consume: no record within %v and the end of the partitions was not reached", *timeout)
}

// isTransport reports a gRPC transport error (no Sluice code).
func isTransport(err error) bool {
	var e *errs.Error
	return !errors.As(err, &e)
}

// groupCommitter commits, for "consume --group", the offsets of the
// records printed (never past them): as it goes, before partitions are
// revoked, and at the end.
type groupCommitter struct {
	co *client.Consumer

	mu        sync.Mutex                      // guards the following
	printed   map[client.TopicPartition]int64 // next offset after the last printed record
	committed map[client.TopicPartition]int64
	last      time.Time // of the last periodic commit; used by the printing goroutine only
}

func (gc *groupCommitter) printedRecord(r client.Record) {
	gc.mu.Lock()
	gc.printed[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	gc.mu.Unlock()
}

// commit commits the printed offsets not committed yet, of only (nil: of
// every partition).
func (gc *groupCommitter) commit(ctx context.Context, only []client.TopicPartition) error {
	gc.mu.Lock()
	todo := map[client.TopicPartition]int64{}
	for tp, off := range gc.printed {
		if gc.committed[tp] != off {
			todo[tp] = off
		}
	}
	if only != nil {
		keep := map[client.TopicPartition]int64{}
		for _, tp := range only {
			if off, ok := todo[tp]; ok {
				keep[tp] = off
			}
		}
		todo = keep
	}
	gc.mu.Unlock()
	if only == nil {
		// Only partitions still owned: a record printed after its
		// partition was revoked must not overwrite the next owner's
		// commits.
		owned := map[client.TopicPartition]bool{}
		for _, tp := range gc.co.Assignment() {
			owned[tp] = true
		}
		for tp := range todo {
			if !owned[tp] {
				delete(todo, tp)
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := gc.co.CommitOffsets(ctx, todo); err != nil {
		return err
	}
	gc.mu.Lock()
	if gc.committed == nil {
		gc.committed = map[client.TopicPartition]int64{}
	}
	for tp, off := range todo {
		gc.committed[tp] = off
	}
	gc.mu.Unlock()
	return nil
}

// revoked commits the printed offsets of revoked partitions (the
// consumer's OnRevoked).
func (gc *groupCommitter) revoked(ctx context.Context, parts []client.TopicPartition) {
	_ = gc.commit(ctx, parts) // the next owner starts from the last commit otherwise
	gc.mu.Lock()
	for _, tp := range parts {
		delete(gc.printed, tp)
	}
	gc.mu.Unlock()
}
