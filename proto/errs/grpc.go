package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Domain is the google.rpc.ErrorInfo domain of Sluice's errors.
const Domain = "sluice.io"

// GRPCCode is the gRPC status code a request-level failure with code c is
// sent with.
func GRPCCode(c sluicev1.ErrorCode) codes.Code {
	switch c {
	case sluicev1.ErrorCode_NONE:
		return codes.OK
	case sluicev1.ErrorCode_NOT_CONTROLLER, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, sluicev1.ErrorCode_LEADER_NOT_AVAILABLE,
		sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER:
		return codes.Unavailable
	case sluicev1.ErrorCode_REQUEST_TIMED_OUT:
		return codes.DeadlineExceeded
	case sluicev1.ErrorCode_STALE_BROKER_EPOCH, sluicev1.ErrorCode_INVALID_TXN_STATE,
		sluicev1.ErrorCode_FENCED_LEADER_EPOCH:
		return codes.FailedPrecondition
	case sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS:
		return codes.AlreadyExists
	case sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:
		return codes.NotFound
	case sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, sluicev1.ErrorCode_KAFKA_STORAGE_ERROR:
		return codes.Internal
	case sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED, sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED,
		sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED, sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
		return codes.PermissionDenied
	case sluicev1.ErrorCode_SASL_AUTHENTICATION_FAILED:
		return codes.Unauthenticated
	}
	return codes.InvalidArgument
}

// Status encodes err as a gRPC status error: the code from GRPCCode (or
// Canceled / DeadlineExceeded for context errors) and a
// google.rpc.ErrorInfo whose reason is the ErrorCode name. md is extra
// ErrorInfo metadata (e.g. "leader_id"); "retriable" is always set.
func Status(err error, md map[string]string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
		return err // already a status from a nested call
	}
	code := Code(err)
	gc := GRPCCode(code)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code, gc = sluicev1.ErrorCode_REQUEST_TIMED_OUT, codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		gc = codes.Canceled
	}
	return NewStatus(gc, code, Message(err), md)
}

// NewStatus is a gRPC status error with gRPC code gc carrying a Sluice
// google.rpc.ErrorInfo: reason = code's name, metadata md plus
// "retriable".
func NewStatus(gc codes.Code, code sluicev1.ErrorCode, msg string, md map[string]string) error {
	meta := map[string]string{"retriable": fmt.Sprint(Retriable(code))}
	for k, v := range md {
		meta[k] = v
	}
	st := status.New(gc, msg)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: code.String(), Domain: Domain, Metadata: meta}); derr == nil {
		st = d
	}
	return st.Err()
}

// FromStatus decodes a gRPC status error carrying a Sluice ErrorInfo into
// an *Error and the ErrorInfo metadata. Other errors (transport failures,
// plain statuses) are returned unchanged with nil metadata.
func FromStatus(err error) (error, map[string]string) {
	if err == nil {
		return nil, nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err, nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			if v, ok := sluicev1.ErrorCode_value[info.Reason]; ok {
				return New(sluicev1.ErrorCode(v), "%s", st.Message()), info.Metadata
			}
		}
	}
	return err, nil
}
