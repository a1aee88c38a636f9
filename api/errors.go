package api

import (
	"fmt"

	"google.golang.org/grpc/codes"

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

const (
	invalidArgument    = codes.InvalidArgument
	failedPrecondition = codes.FailedPrecondition
	codesDeadline      = codes.DeadlineExceeded
)
