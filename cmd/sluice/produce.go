package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/client"
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

// produce sends one record per stdin line and exits once every record is
// acknowledged, failing on the first record error.
func (e *env) produce(ctx context.Context, args []string) error {
	fs := e.newFlags("produce", "produce TOPIC [--partition P] [--key-separator S] [--acks all|1|0]\n\nReads one record per line from stdin (the key is the text before the\nseparator when --key-separator is given) and exits once all are acknowledged.")
	partition := fs.Int("partition", -1, "partition to produce to (-1: by key hash, sticky when keyless)")
	keySep := fs.String("key-separator", "", "split each line into key and value at the first occurrence of this string")
	acksFlag := fs.String("acks", "all", "acknowledgement: all, 1 (leader) or 0 (none)")
	maxLine := fs.Int("max-line-bytes", 16<<20, "longest accepted input line")
	delivery := fs.Duration("delivery-timeout", 30*time.Second, "give up on a record not acknowledged within this time (retries included)")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	topic := pos[0]
	acks, err := parseAcks(*acksFlag)
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.NewProducer(client.WithAcks(acks), client.WithDeliveryTimeout(*delivery))
	if err != nil {
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
	sc.Buffer(make([]byte, 0, 1<<20), *maxLine)
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
	}
	scanErr := sc.Err()
	flushErr := p.Flush(ctx)
	p.Close()
	if err := failed(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if scanErr != nil {
		return fmt.Errorf("produce: reading stdin: %w", scanErr)
	}
	if flushErr != nil {
		return fmt.Errorf("produce: %d of %d records acknowledged: %w", acked, sent, flushErr)
	}
	return nil
}
