// Package errs is Sluice's typed domain error. Codes come from the single
// table in proto/sluice/v1/errors.proto (the ErrorCode enum and its
// retriable option); this package only reads that table.
package errs

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Error is an error with a wire code. Message is for people; Code is for
// programs.
type Error struct {
	Code    sluicev1.ErrorCode
	Message string
	// Cause is the underlying error, if any (an I/O error under a
	// KAFKA_STORAGE_ERROR): errors.Is and errors.As look through it. It
	// stays on this side of the wire; Message already says it for people.
	Cause error
}

// New returns an *Error with a formatted message. A %w verb in format
// becomes the error's Cause (as with fmt.Errorf), so the typed error keeps
// the error it reports.
func New(code sluicev1.ErrorCode, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	e := &Error{Code: code, Message: wrapped.Error()}
	if u := errors.Unwrap(wrapped); u != nil {
		e.Cause = u
	} else if us, ok := wrapped.(interface{ Unwrap() []error }); ok && len(us.Unwrap()) > 0 {
		e.Cause = errors.Join(us.Unwrap()...)
	}
	return e
}

// Unwrap returns the underlying error (nil if none).
func (e *Error) Unwrap() error { return e.Cause }

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Retriable reports whether the same request may succeed if sent again.
func (e *Error) Retriable() bool { return Retriable(e.Code) }

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Code returns the wire code of err: NONE for nil, the code of the first
// *Error in its chain, or UNKNOWN_SERVER_ERROR otherwise.
func Code(err error) sluicev1.ErrorCode {
	if err == nil {
		return sluicev1.ErrorCode_NONE
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR
}

// Message returns err's human message without the code prefix.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

var retriable = func() map[sluicev1.ErrorCode]bool {
	m := map[sluicev1.ErrorCode]bool{}
	vals := sluicev1.ErrorCode(0).Descriptor().Values()
	for i := 0; i < vals.Len(); i++ {
		v := vals.Get(i)
		opts, _ := v.Options().(*descriptorpb.EnumValueOptions)
		if opts != nil && proto.GetExtension(opts, sluicev1.E_Retriable).(bool) {
			m[sluicev1.ErrorCode(v.Number())] = true
		}
	}
	return m
}()

// Retriable reports whether code is marked retriable in the table.
func Retriable(code sluicev1.ErrorCode) bool { return retriable[code] }

// Entry is one row of the error table.
type Entry struct {
	Code      sluicev1.ErrorCode
	Retriable bool
	Comment   string
}

// Table returns every code in numeric order with its retriable flag and
// the comment written next to it in errors.proto (when present in the
// descriptor's source info; the generated Go descriptor drops comments, so
// Comment is usually empty).
func Table() []Entry {
	vals := sluicev1.ErrorCode(0).Descriptor().Values()
	out := make([]Entry, 0, vals.Len())
	for i := 0; i < vals.Len(); i++ {
		c := sluicev1.ErrorCode(vals.Get(i).Number())
		out = append(out, Entry{Code: c, Retriable: retriable[c]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
}
