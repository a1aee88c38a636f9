package api

import (
	"context"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// UnregisterBroker implements the Controller service: a broker's
// registration removed (controller.UnregisterBroker). The refusals
// (BROKER_ID_NOT_REGISTERED, INVALID_REQUEST for a live broker or one
// that still hosts replicas) are in the response; NOT_CONTROLLER and an
// expired request are gRPC errors.
func (s *ControllerService) UnregisterBroker(ctx context.Context, req *sluicev1.UnregisterBrokerRequest) (*internalv1.ControllerUnregisterBrokerResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &sluicev1.UnregisterBrokerResponse{}
	err := s.ctl.UnregisterBroker(ctx, req.BrokerId)
	switch {
	case err == nil:
	case errs.Code(err) == sluicev1.ErrorCode_NOT_CONTROLLER || ctx.Err() != nil:
		return nil, s.status(err)
	default:
		resp.ErrorCode, resp.ErrorMessage = partitionError(err)
	}
	return &internalv1.ControllerUnregisterBrokerResponse{Response: resp, MetadataOffset: s.ctl.Offset()}, nil
}

// UnregisterBroker forwards a broker's unregistration to the active
// controller, then waits until this broker's image shows it, so a
// DescribeCluster sent here next no longer lists it. The controller's
// refusals are in the response; NOT_CONTROLLER and timeouts are request
// errors. It needs ALTER on the cluster (else PERMISSION_DENIED, nothing
// forwarded).
func (s *Server) UnregisterBroker(ctx context.Context, req *sluicev1.UnregisterBrokerRequest) (*sluicev1.UnregisterBrokerResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerUnregisterBrokerResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.UnregisterBroker(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT, "the broker was unregistered but broker %d has not seen it yet: %v", s.self.NodeID, err)
	}
	if out.Response.ErrorCode == sluicev1.ErrorCode_NONE {
		s.log.Info("broker unregistered", "broker", req.BrokerId)
	}
	return out.Response, nil
}
