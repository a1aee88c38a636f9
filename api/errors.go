package api

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of Sluice's errors.
const ErrorDomain = errs.Domain

// requestError is a request-level failure: a gRPC status whose
// google.rpc.ErrorInfo carries the ErrorCode name as its reason.
func requestError(c codes.Code, code sluicev1.ErrorCode, format string, args ...any) error {
	return errs.NewStatus(c, code, fmt.Sprintf(format, args...), nil)
}

func invalidRequest(format string, args ...any) error {
	return requestError(codes.InvalidArgument, sluicev1.ErrorCode_INVALID_REQUEST, format, args...)
}

// partitionError splits err into the per-partition code and message.
func partitionError(err error) (sluicev1.ErrorCode, string) {
	return errs.Code(err), errs.Message(err)
}

// errNodeStopping ends the long-lived streams of a node that is shutting
// down: retriable, the client goes to another broker (or waits for this
// one to come back).
var errNodeStopping = status.Error(codes.Unavailable, "node is shutting down")

const (
	invalidArgument    = codes.InvalidArgument
	failedPrecondition = codes.FailedPrecondition
	codesDeadline      = codes.DeadlineExceeded
)
