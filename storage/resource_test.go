package storage

import (
	"errors"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// checkResourceErr asserts err is the resource error of resource.go: a
// retriable KAFKA_STORAGE_ERROR wrapping the OS error, not the offline
// error, and that the log stayed online.
func checkResourceErr(t *testing.T, l *Log, err error, cause error) {
	t.Helper()
	if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !errs.Retriable(errs.Code(err)) {
		t.Fatalf("error %v (code %v), want a retriable KAFKA_STORAGE_ERROR", err, errs.Code(err))
	}
	if !IsResourceError(err) || !errors.Is(err, cause) {
		t.Fatalf("error %v: IsResourceError %v, wraps %v: %v", err, IsResourceError(err), cause, errors.Is(err, cause))
	}
	if f := l.Failure(); f != nil {
		t.Fatalf("the log went offline after a resource error: %v", f)
	}
}
