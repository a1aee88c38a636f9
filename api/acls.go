package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Access control lists (issue 33; Kafka's CreateAcls, DescribeAcls and
// DeleteAcls). A broker forwards creations and deletions to the active
// controller, which stores the ACLs in the metadata log
// (controller.CreateAcls, DeleteAcls); every broker then holds them in its
// image, where DescribeAcls reads them and the authorizer enforces them.
// The rules (what an ACL may be, what a filter matches) are the
// controller's: this file only translates the wire's enumerations to
// Kafka's names, which the controller checks.

// Enumeration values as the controller names them: Kafka's names.
const (
	resourceTypePrefix = "RESOURCE_TYPE_"
	patternTypePrefix  = "PATTERN_TYPE_"
	operationPrefix    = "ACL_OPERATION_"
	permissionPrefix   = "ACL_PERMISSION_"
)

// kafkaName is an enumeration value's name without its prefix: "TOPIC"
// for RESOURCE_TYPE_TOPIC, "UNSPECIFIED", or the number of a value this
// build does not know (which the controller refuses as it refuses ANY).
func kafkaName(value interface{ String() string }, prefix string) string {
	return strings.TrimPrefix(value.String(), prefix)
}

// aclFromProto is b with Kafka's names and its host as ACLs write it
// (controller.CanonicalAclHost); what is not a valid ACL is the
// controller's to refuse.
func aclFromProto(b *sluicev1.AclBinding) controller.Acl {
	host := b.GetHost()
	if h, ok := controller.CanonicalAclHost(host); ok {
		host = h
	}
	return controller.Acl{
		ResourceType: controller.ResourceType(kafkaName(b.GetResourceType(), resourceTypePrefix)),
		ResourceName: b.GetResourceName(),
		PatternType:  controller.PatternType(kafkaName(b.GetPatternType(), patternTypePrefix)),
		Principal:    b.GetPrincipal(),
		Host:         host,
		Operation:    controller.AclOperation(kafkaName(b.GetOperation(), operationPrefix)),
		Permission:   controller.AclPermission(kafkaName(b.GetPermission(), permissionPrefix)),
	}
}

// aclToProto is aclFromProto's inverse for a stored ACL.
func aclToProto(a controller.Acl) *sluicev1.AclBinding {
	return &sluicev1.AclBinding{
		ResourceType: sluicev1.ResourceType(sluicev1.ResourceType_value[resourceTypePrefix+string(a.ResourceType)]),
		ResourceName: a.ResourceName,
		PatternType:  sluicev1.PatternType(sluicev1.PatternType_value[patternTypePrefix+string(a.PatternType)]),
		Principal:    a.Principal,
		Host:         a.Host,
		Operation:    sluicev1.AclOperation(sluicev1.AclOperation_value[operationPrefix+string(a.Operation)]),
		Permission:   sluicev1.AclPermission(sluicev1.AclPermission_value[permissionPrefix+string(a.Permission)]),
	}
}

func aclsToProto(acls []controller.Acl) []*sluicev1.AclBinding {
	out := make([]*sluicev1.AclBinding, len(acls))
	for i, a := range acls {
		out[i] = aclToProto(a)
	}
	return out
}

// aclFilterFromProto is f as the controller matches it: UNSPECIFIED and
// ANY are the empty (any) value, an empty string is any, a host is
// written as ACLs write it. A value no ACL can have is the controller's
// to refuse (AclFilter.Validate).
func aclFilterFromProto(f *sluicev1.AclBindingFilter) controller.AclFilter {
	name := func(value interface{ String() string }, prefix string, n int32) string {
		if n == 0 || n == 1 { // UNSPECIFIED and ANY, in every ACL enumeration
			return ""
		}
		return kafkaName(value, prefix)
	}
	host := f.GetHost()
	if h, ok := controller.CanonicalAclHost(host); ok {
		host = h
	}
	return controller.AclFilter{
		ResourceType: controller.ResourceType(name(f.GetResourceType(), resourceTypePrefix, int32(f.GetResourceType()))),
		ResourceName: f.GetResourceName(),
		PatternType:  controller.PatternType(name(f.GetPatternType(), patternTypePrefix, int32(f.GetPatternType()))),
		Principal:    f.GetPrincipal(),
		Host:         host,
		Operation:    controller.AclOperation(name(f.GetOperation(), operationPrefix, int32(f.GetOperation()))),
		Permission:   controller.AclPermission(name(f.GetPermission(), permissionPrefix, int32(f.GetPermission()))),
	}
}

// CreateAcls implements the Controller service: one result per creation,
// in order (controller.CreateAcls). NOT_CONTROLLER and an expired request
// are gRPC errors.
func (s *ControllerService) CreateAcls(ctx context.Context, req *sluicev1.CreateAclsRequest) (*internalv1.ControllerCreateAclsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	acls := make([]controller.Acl, len(req.Creations))
	for i, b := range req.Creations {
		acls[i] = aclFromProto(b)
	}
	perAcl, offset, err := s.ctl.CreateAcls(ctx, acls)
	if err != nil {
		return nil, s.status(err)
	}
	resp := &sluicev1.CreateAclsResponse{Results: make([]*sluicev1.AclCreationResult, len(perAcl))}
	for i, err := range perAcl {
		r := &sluicev1.AclCreationResult{}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = errs.Code(err), errs.Message(err)
		}
		resp.Results[i] = r
	}
	return &internalv1.ControllerCreateAclsResponse{Response: resp, MetadataOffset: offset}, nil
}

// DeleteAcls implements the Controller service: one result per filter, in
// order, with the ACLs it deleted (controller.DeleteAcls). Filters that
// match more than controller.MaxAclDeletions ACLs together, NOT_CONTROLLER
// and an expired request are gRPC errors.
func (s *ControllerService) DeleteAcls(ctx context.Context, req *sluicev1.DeleteAclsRequest) (*internalv1.ControllerDeleteAclsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	filters := make([]controller.AclFilter, len(req.Filters))
	for i, f := range req.Filters {
		filters[i] = aclFilterFromProto(f)
	}
	results, offset, err := s.ctl.DeleteAcls(ctx, filters)
	if err != nil {
		return nil, s.status(err)
	}
	resp := &sluicev1.DeleteAclsResponse{FilterResults: make([]*sluicev1.DeleteAclsFilterResult, len(results))}
	for i, res := range results {
		r := &sluicev1.DeleteAclsFilterResult{Deleted: aclsToProto(res.Deleted)}
		if res.Err != nil {
			r.ErrorCode, r.ErrorMessage = errs.Code(res.Err), errs.Message(res.Err)
		}
		resp.FilterResults[i] = r
	}
	return &internalv1.ControllerDeleteAclsResponse{Response: resp, MetadataOffset: offset}, nil
}

// CreateAcls forwards the creations to the active controller, then waits
// until this broker's image holds them, so that a DescribeAcls sent here
// next shows them and this broker enforces them. An invalid ACL is
// refused alone (INVALID_REQUEST in its result); NOT_CONTROLLER and
// timeouts are request errors. It needs ALTER on the cluster, as Kafka's
// (else PERMISSION_DENIED, nothing forwarded).
func (s *Server) CreateAcls(ctx context.Context, req *sluicev1.CreateAclsRequest) (*sluicev1.CreateAclsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if len(req.Creations) == 0 {
		return &sluicev1.CreateAclsResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerCreateAclsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.CreateAcls(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT,
			"the controller answered but broker %d has not seen the ACLs created yet: %v", s.self.NodeID, err)
	}
	created := 0
	for _, r := range out.Response.Results {
		if r.ErrorCode == sluicev1.ErrorCode_NONE {
			created++
		}
	}
	s.log.Info("ACLs created", "created", created, "refused", len(out.Response.Results)-created)
	return out.Response, nil
}

// maxDescribedAclBytes bounds a DescribeAcls answer: what is left of
// MaxMessageSize after a headroom for the framing.
const maxDescribedAclBytes = MaxMessageSize - answerHeadroom

// aclAnswerOverhead is an ACL's bytes in an answer besides its strings:
// the enumerations, the fields' tags and lengths.
const aclAnswerOverhead = 32

// DescribeAcls answers from this broker's metadata image: the ACLs the
// filter matches (controller.AclFilter), in AclList's order. A filter
// with a value no ACL can have is INVALID_REQUEST in the answer; so is
// one that matches more ACLs than an answer carries. A broker without
// metadata yet answers LEADER_NOT_AVAILABLE rather than "no ACL". It
// needs DESCRIBE on the cluster, as Kafka's (else PERMISSION_DENIED).
func (s *Server) DescribeAcls(ctx context.Context, req *sluicev1.DescribeAclsRequest) (*sluicev1.DescribeAclsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpDescribe, auth.Cluster); err != nil {
		return nil, err
	}
	if err := s.metadataLoaded(); err != nil {
		return nil, errs.Status(err, nil)
	}
	f := aclFilterFromProto(req.Filter)
	if err := f.Validate(); err != nil {
		return &sluicev1.DescribeAclsResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}, nil
	}
	acls := s.cache.Image().MatchingAcls(f)
	size := 0
	for _, a := range acls {
		size += aclAnswerOverhead + len(a.ResourceName) + len(a.Principal) + len(a.Host)
	}
	if size > maxDescribedAclBytes {
		return &sluicev1.DescribeAclsResponse{ErrorCode: sluicev1.ErrorCode_INVALID_REQUEST,
			ErrorMessage: fmt.Sprintf("the filter matches %d ACLs, more than one answer carries: narrow it (by resource type, principal or name)", len(acls))}, nil
	}
	return &sluicev1.DescribeAclsResponse{Acls: aclsToProto(acls)}, nil
}

// DeleteAcls forwards the filters to the active controller, then waits
// until this broker's image no longer holds the ACLs deleted. Each
// filter's result lists the ACLs it deleted; an invalid filter is
// refused alone (INVALID_REQUEST in its result). Filters that together
// match more than controller.MaxAclDeletions ACLs refuse the request
// (INVALID_REQUEST, nothing deleted); NOT_CONTROLLER and timeouts are
// request errors. It needs ALTER on the cluster, as Kafka's (else
// PERMISSION_DENIED, nothing forwarded).
func (s *Server) DeleteAcls(ctx context.Context, req *sluicev1.DeleteAclsRequest) (*sluicev1.DeleteAclsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if len(req.Filters) == 0 {
		return &sluicev1.DeleteAclsResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerDeleteAclsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.DeleteAcls(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT,
			"the controller answered but broker %d has not seen the ACLs deleted yet: %v", s.self.NodeID, err)
	}
	matched := 0 // an ACL two filters match is counted twice, deleted once
	for _, r := range out.Response.FilterResults {
		matched += len(r.Deleted)
	}
	s.log.Info("ACLs deleted", "filters", len(req.Filters), "matched", matched)
	return out.Response, nil
}
