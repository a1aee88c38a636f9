package api

import (
	"context"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Client quotas' admin path (issue 33; Kafka's AlterClientQuotas and
// DescribeClientQuotas). A broker forwards alterations to the active
// controller, which stores them in the metadata log
// (controller.AlterClientQuotas); every broker then holds them in its
// image, where DescribeClientQuotas reads them and the quota manager
// (quota.go, auth.QuotaManager) enforces them. The rules are the
// controller's: this file only translates.

func quotaNameFromProto(n *sluicev1.QuotaEntityName) controller.QuotaName {
	if n == nil {
		return controller.QuotaName{}
	}
	return controller.QuotaName{Name: n.Name, Default: n.IsDefault}
}

func quotaNameToProto(n controller.QuotaName) *sluicev1.QuotaEntityName {
	if !n.Present() {
		return nil
	}
	return &sluicev1.QuotaEntityName{Name: n.Name, IsDefault: n.Default}
}

func quotaEntityFromProto(e *sluicev1.QuotaEntity) controller.QuotaEntity {
	return controller.QuotaEntity{User: quotaNameFromProto(e.GetUser()), ClientID: quotaNameFromProto(e.GetClientId())}
}

func quotaEntityToProto(e controller.QuotaEntity) *sluicev1.QuotaEntity {
	return &sluicev1.QuotaEntity{User: quotaNameToProto(e.User), ClientId: quotaNameToProto(e.ClientID)}
}

// AlterClientQuotas implements the Controller service: one result per
// entry, in order (controller.AlterClientQuotas).
func (s *ControllerService) AlterClientQuotas(ctx context.Context, req *sluicev1.AlterClientQuotasRequest) (*internalv1.ControllerAlterClientQuotasResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	entries := make([]controller.ClientQuota, len(req.Entries))
	for i, e := range req.Entries {
		entries[i].Entity = quotaEntityFromProto(e.Entity)
		for _, op := range e.Ops {
			entries[i].Ops = append(entries[i].Ops, controller.QuotaOp{Key: op.Key, Value: op.Value, Remove: op.Remove})
		}
	}
	perEntry, offset, err := s.ctl.AlterClientQuotas(ctx, entries, req.ValidateOnly)
	if err != nil {
		return nil, s.status(err)
	}
	resp := &sluicev1.AlterClientQuotasResponse{Results: make([]*sluicev1.AlterClientQuotasResult, len(perEntry))}
	for i, err := range perEntry {
		resp.Results[i] = &sluicev1.AlterClientQuotasResult{Entity: req.Entries[i].Entity,
			ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}
	}
	return &internalv1.ControllerAlterClientQuotasResponse{Response: resp, MetadataOffset: offset}, nil
}

// AlterClientQuotas forwards the alterations to the active controller,
// then waits until this broker's image holds them, so that a
// DescribeClientQuotas sent here next shows them and this broker enforces
// them. An invalid entry is refused alone (INVALID_REQUEST in its
// result); NOT_CONTROLLER and timeouts are request errors. It needs
// ALTER_CONFIGS on the cluster, as Kafka's.
func (s *Server) AlterClientQuotas(ctx context.Context, req *sluicev1.AlterClientQuotasRequest) (*sluicev1.AlterClientQuotasResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlterConfigs, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if len(req.Entries) == 0 {
		return &sluicev1.AlterClientQuotasResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerAlterClientQuotasResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.AlterClientQuotas(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT,
			"the controller answered but broker %d has not seen the quotas altered yet: %v", s.self.NodeID, err)
	}
	return out.Response, nil
}

// quotaMatches reports whether filter component f selects n (Kafka's
// ClientQuotaFilterComponent); f nil selects anything, absent included,
// unless strict.
func quotaMatches(f *sluicev1.QuotaFilterComponent, n controller.QuotaName, strict bool) bool {
	if f == nil {
		return !strict || !n.Present()
	}
	switch f.MatchType {
	case sluicev1.QuotaMatchType_QUOTA_MATCH_TYPE_EXACT:
		return !n.Default && n.Name == f.Name && n.Present()
	case sluicev1.QuotaMatchType_QUOTA_MATCH_TYPE_DEFAULT:
		return n.Default
	}
	return n.Present()
}

// quotaAnswerOverhead is an entry's bytes in an answer besides its
// names: the entity's messages and three keyed values.
const quotaAnswerOverhead = 128

// DescribeClientQuotas answers from this broker's metadata image: the
// entities the filter selects and their quotas, ordered by entity (user,
// then client id), keys in controller.QuotaKeys' order. It needs
// DESCRIBE_CONFIGS on the cluster, as Kafka's.
func (s *Server) DescribeClientQuotas(ctx context.Context, req *sluicev1.DescribeClientQuotasRequest) (*sluicev1.DescribeClientQuotasResponse, error) {
	if err := s.authz.Require(ctx, auth.OpDescribeConfigs, auth.Cluster); err != nil {
		return nil, err
	}
	if err := s.metadataLoaded(); err != nil {
		return nil, errs.Status(err, nil)
	}
	resp := &sluicev1.DescribeClientQuotasResponse{}
	size := 0
	for _, eq := range s.cache.Image().QuotaList() {
		if !quotaMatches(req.User, eq.Entity.User, req.Strict) || !quotaMatches(req.ClientId, eq.Entity.ClientID, req.Strict) {
			continue
		}
		entry := &sluicev1.ClientQuotaEntry{Entity: quotaEntityToProto(eq.Entity)}
		for _, k := range controller.QuotaKeys {
			if v, ok := eq.Values[k]; ok {
				entry.Values = append(entry.Values, &sluicev1.QuotaValue{Key: k, Value: v})
			}
		}
		resp.Entries = append(resp.Entries, entry)
		// An answer must fit in a gRPC message, as DescribeAcls's.
		if size += quotaAnswerOverhead + len(eq.Entity.User.Name) + len(eq.Entity.ClientID.Name); size > maxDescribedAclBytes {
			return &sluicev1.DescribeClientQuotasResponse{ErrorCode: sluicev1.ErrorCode_INVALID_REQUEST,
				ErrorMessage: "the filter matches more quotas than one answer carries: narrow it (by user or client id)"}, nil
		}
	}
	return resp, nil
}
