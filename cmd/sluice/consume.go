package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	fs := e.newFlags("consume", "consume TOPIC [--partition P] [--from-beginning | --offset O] [--max-messages N]\n              [--timeout D] [--isolation read_committed|read_uncommitted] [--print-offsets] [--print-keys]\n\nPrints one record value per line. Starts at the latest offset unless told\notherwise; reads every partition unless --partition is given.")
	partition := fs.Int("partition", -1, "partition to read (-1: all)")
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
	var iso client.Isolation
	switch *isolation {
	case "read_committed":
		iso = client.ReadCommitted
	case "read_uncommitted":
		iso = client.ReadUncommitted
	default:
		return fmt.Errorf("consume: --isolation must be read_committed or read_uncommitted, got %q", *isolation)
	}
	if *fromBeginning && *offset >= 0 {
		return fmt.Errorf("consume: --from-beginning and --offset exclude each other")
	}
	start := client.OffsetLatest
	if *fromBeginning {
		start = client.OffsetEarliest
	} else if *offset >= 0 {
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
	if *partition >= 0 {
		if int32(*partition) >= nparts {
			return fmt.Errorf("consume: topic %q: %w", topic, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "no partition %d (the topic has %d)", *partition, nparts))
		}
		parts = []int32{int32(*partition)}
	} else {
		for p := int32(0); p < nparts; p++ {
			parts = append(parts, p)
		}
	}

	co, err := c.NewConsumer(client.WithIsolation(iso), client.WithMaxWait(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer co.Close()
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
		if *timeout > 0 {
			pctx, cancel = context.WithDeadline(ctx, deadline)
		}
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break // --timeout with no new record
			}
			if ctx.Err() != nil {
				break // interrupted
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
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("consume: writing output: %w", err)
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
	return fmt.Errorf("consume: no record within %v and the end of the partitions was not reached", *timeout)
}

// isTransport reports a gRPC transport error (no Sluice code).
func isTransport(err error) bool {
	var e *errs.Error
	return !errors.As(err, &e)
}
