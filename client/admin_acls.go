package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Access control lists (issue 33; Kafka's CreateAcls, DescribeAcls and
// DeleteAcls, with Kafka's resource types, pattern types, operations and
// permissions). The cluster keeps them in its metadata: every broker
// enforces them once its metadata holds them.

// CreateAcls stores acls (at most 1,000 per call). The slice has one
// error per ACL, in order: nil when the ACL is stored (an ACL stored
// already is a success, and changes nothing), else the refusal as an
// *errs.Error: INVALID_REQUEST for a field out of its domain (an ANY or
// MATCH value, a principal not TYPE:NAME, a host neither "*" nor an IP
// address, a CLUSTER resource not named "kafka-cluster", ...) or beyond
// the 100,000 ACLs a cluster keeps. The error is for the request as a
// whole. Once it returns, the broker that answered enforces the ACLs; the
// other brokers follow within moments.
func (c *Client) CreateAcls(ctx context.Context, acls []*sluicev1.AclBinding) ([]error, error) {
	var resp *sluicev1.CreateAclsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).CreateAcls(ctx, &sluicev1.CreateAclsRequest{Creations: acls, TimeoutMs: c.adminTimeoutMs(ctx)})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create ACLs: %w", err)
	}
	out := make([]error, len(acls))
	for i := range acls {
		if i >= len(resp.Results) {
			out[i] = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for ACL %d in the response", i)
			continue
		}
		out[i] = codeError(resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage)
	}
	return out, nil
}

// DescribeAcls lists the ACLs filter matches (nil: every ACL), as one
// broker's metadata holds them, ordered by resource (type, name, pattern
// type), principal, host, operation and permission. In a filter an empty
// string, UNSPECIFIED and ANY match anything; PATTERN_TYPE_MATCH with a
// resource name selects the ACLs that apply to that resource (LITERAL
// ones of that name or "*", PREFIXED ones it starts with). A filter with
// a value no ACL can have is INVALID_REQUEST (an *errs.Error).
func (c *Client) DescribeAcls(ctx context.Context, filter *sluicev1.AclBindingFilter) ([]*sluicev1.AclBinding, error) {
	var resp *sluicev1.DescribeAclsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DescribeAcls(ctx, &sluicev1.DescribeAclsRequest{Filter: filter})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("describe ACLs: %w", err)
	}
	if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return nil, fmt.Errorf("describe ACLs: %w", err)
	}
	return resp.Acls, nil
}

// DeletedAcls is one filter's outcome of DeleteAcls.
type DeletedAcls struct {
	// Acls are the ACLs the filter matched and that were deleted. An ACL
	// two filters match is deleted once and listed for both.
	Acls []*sluicev1.AclBinding
	// Err is why the filter deleted nothing (INVALID_REQUEST: a value no
	// ACL can have), as an *errs.Error.
	Err error
}

// DeleteAcls deletes the ACLs each filter matches (at most 1,000 filters
// per call; filters as DescribeAcls'; the empty filter matches every
// ACL). It returns one result per filter, in order. The error is for the
// request as a whole: filters that together match more than 10,000 ACLs
// are INVALID_REQUEST, and nothing is deleted.
func (c *Client) DeleteAcls(ctx context.Context, filters []*sluicev1.AclBindingFilter) ([]DeletedAcls, error) {
	var resp *sluicev1.DeleteAclsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DeleteAcls(ctx, &sluicev1.DeleteAclsRequest{Filters: filters, TimeoutMs: c.adminTimeoutMs(ctx)})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delete ACLs: %w", err)
	}
	out := make([]DeletedAcls, len(filters))
	for i := range filters {
		if i >= len(resp.FilterResults) {
			out[i].Err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for filter %d in the response", i)
			continue
		}
		r := resp.FilterResults[i]
		out[i] = DeletedAcls{Acls: r.Deleted, Err: codeError(r.ErrorCode, r.ErrorMessage)}
	}
	return out, nil
}
