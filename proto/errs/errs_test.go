package errs_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestRetriable(t *testing.T) {
	tests := []struct {
		code sluicev1.ErrorCode
		want bool
	}{
		{sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, true},
		{sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, true},
		{sluicev1.ErrorCode_CORRUPT_RECORD, true},
		{sluicev1.ErrorCode_INVALID_RECORD, false},
		{sluicev1.ErrorCode_NONE, false},
		{sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, false},
		{sluicev1.ErrorCode(9999), false},
	}
	for _, tc := range tests {
		if got := errs.Retriable(tc.code); got != tc.want {
			t.Errorf("Retriable(%v) = %v, want %v", tc.code, got, tc.want)
		}
		if got := errs.New(tc.code, "x").Retriable(); got != tc.want {
			t.Errorf("(*Error).Retriable for %v = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestCode(t *testing.T) {
	e := errs.New(sluicev1.ErrorCode_INVALID_RECORD, "record %d is bad", 3)
	tests := []struct {
		name string
		err  error
		want sluicev1.ErrorCode
	}{
		{"nil", nil, sluicev1.ErrorCode_NONE},
		{"direct", e, sluicev1.ErrorCode_INVALID_RECORD},
		{"wrapped", fmt.Errorf("append: %w", e), sluicev1.ErrorCode_INVALID_RECORD},
		{"wrapped twice", fmt.Errorf("produce: %w", fmt.Errorf("append: %w", e)), sluicev1.ErrorCode_INVALID_RECORD},
		{"joined", errors.Join(io.EOF, errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "")), sluicev1.ErrorCode_NOT_CONTROLLER},
		{"first in chain wins", fmt.Errorf("%w", &wrapper{code: errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "outer"), inner: e}), sluicev1.ErrorCode_REQUEST_TIMED_OUT},
		{"plain", errors.New("boom"), sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR},
		{"plain wrapped", fmt.Errorf("x: %w", io.EOF), sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR},
	}
	for _, tc := range tests {
		if got := errs.Code(tc.err); got != tc.want {
			t.Errorf("%s: Code = %v, want %v", tc.name, got, tc.want)
		}
	}
}

type wrapper struct {
	code  error
	inner error
}

func (w *wrapper) Error() string   { return w.code.Error() }
func (w *wrapper) Unwrap() []error { return []error{w.code, w.inner} }

func TestErrorAndMessage(t *testing.T) {
	e := errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes", 10)
	if e.Error() != "MESSAGE_TOO_LARGE: batch of 10 bytes" {
		t.Errorf("Error() = %q", e.Error())
	}
	if got := (&errs.Error{Code: sluicev1.ErrorCode_NOT_COORDINATOR}).Error(); got != "NOT_COORDINATOR" {
		t.Errorf("Error() without message = %q", got)
	}
	wrapped := fmt.Errorf("produce: %w", e)
	if errs.Message(wrapped) != "batch of 10 bytes" {
		t.Errorf("Message = %q", errs.Message(wrapped))
	}
	if errs.Message(nil) != "" || errs.Message(io.EOF) != io.EOF.Error() {
		t.Error("Message of nil or a plain error")
	}
	if !errors.Is(wrapped, &errs.Error{Code: sluicev1.ErrorCode_MESSAGE_TOO_LARGE}) {
		t.Error("errors.Is does not match on the code")
	}
	if errors.Is(wrapped, &errs.Error{Code: sluicev1.ErrorCode_INVALID_RECORD}) {
		t.Error("errors.Is matches another code")
	}
}

func TestTable(t *testing.T) {
	table := errs.Table()
	vals := sluicev1.ErrorCode(0).Descriptor().Values()
	if len(table) != vals.Len() || len(table) != len(sluicev1.ErrorCode_name) {
		t.Fatalf("Table has %d entries, enum has %d values", len(table), vals.Len())
	}
	seen := map[sluicev1.ErrorCode]bool{}
	for i, e := range table {
		if i > 0 && table[i-1].Code >= e.Code {
			t.Errorf("Table not sorted: %v (%d) after %v (%d)", e.Code, e.Code, table[i-1].Code, table[i-1].Code)
		}
		if seen[e.Code] {
			t.Errorf("%v listed twice", e.Code)
		}
		seen[e.Code] = true
		if _, ok := sluicev1.ErrorCode_name[int32(e.Code)]; !ok {
			t.Errorf("%d is not an ErrorCode", e.Code)
		}
		if e.Retriable != errs.Retriable(e.Code) {
			t.Errorf("%v: Table says retriable %v, Retriable says %v", e.Code, e.Retriable, errs.Retriable(e.Code))
		}
	}
	for n := range sluicev1.ErrorCode_name {
		if !seen[sluicev1.ErrorCode(n)] {
			t.Errorf("%v missing from Table", sluicev1.ErrorCode(n))
		}
	}
	if table[0].Code != sluicev1.ErrorCode_NONE || table[0].Retriable {
		t.Errorf("first entry %+v, want NONE", table[0])
	}
	// Kafka's numbers.
	for code, n := range map[sluicev1.ErrorCode]int32{
		sluicev1.ErrorCode_CORRUPT_RECORD:         3,
		sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER: 7,
		sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS:    19,
		sluicev1.ErrorCode_INVALID_RECORD:         87,
	} {
		if int32(code) != n {
			t.Errorf("%v = %d, want %d", code, code, n)
		}
	}
}

// The typed error keeps its cause: errors.Is still finds an I/O error
// under a KAFKA_STORAGE_ERROR, and the message says it too.
func TestNewKeepsTheWrappedCause(t *testing.T) {
	cause := fmt.Errorf("write segment: %w", io.ErrShortWrite)
	e := errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "append to t-0: %w", cause)
	if !errors.Is(e, io.ErrShortWrite) {
		t.Fatalf("errors.Is(%v, io.ErrShortWrite) = false", e)
	}
	if errs.Code(fmt.Errorf("produce: %w", e)) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR {
		t.Fatal("code lost under a wrap")
	}
	if want := "append to t-0: write segment: short write"; e.Message != want {
		t.Fatalf("Message = %q, want %q", e.Message, want)
	}
	if errs.New(sluicev1.ErrorCode_INVALID_RECORD, "plain %d", 1).Unwrap() != nil {
		t.Fatal("an error made without %w has no cause")
	}
	two := errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "%w and %w", io.EOF, io.ErrClosedPipe)
	if !errors.Is(two, io.EOF) || !errors.Is(two, io.ErrClosedPipe) {
		t.Fatal("both causes of a two-%w message must be found")
	}
}
