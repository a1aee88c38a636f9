package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Client quotas (issue 33; Kafka's AlterClientQuotas and
// DescribeClientQuotas, KIP-546): rates per user and/or client id, each a
// name or the default, enforced by every broker on its own traffic
// (docs/security.md "Quotas").

// Quota keys (Kafka's).
const (
	QuotaProducerByteRate  = "producer_byte_rate"
	QuotaConsumerByteRate  = "consumer_byte_rate"
	QuotaRequestPercentage = "request_percentage"
)

// AlterClientQuotas sets and removes quotas, one entry per entity, each
// applied whole or not at all. The slice has one error per entry, in
// order: nil when applied, else an *errs.Error (INVALID_REQUEST: an
// unknown key, a value not positive, an entity named twice). With
// validateOnly the entries are checked and nothing is stored. The error
// is for the request as a whole. Once it returns, the broker that
// answered enforces the changes; the others follow within moments.
func (c *Client) AlterClientQuotas(ctx context.Context, entries []*sluicev1.ClientQuotaAlteration, validateOnly bool) ([]error, error) {
	var resp *sluicev1.AlterClientQuotasResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).AlterClientQuotas(ctx, &sluicev1.AlterClientQuotasRequest{
			Entries: entries, ValidateOnly: validateOnly, TimeoutMs: c.adminTimeoutMs(ctx)})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("alter client quotas: %w", err)
	}
	out := make([]error, len(entries))
	for i := range entries {
		if i >= len(resp.Results) {
			out[i] = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for entry %d in the response", i)
			continue
		}
		out[i] = codeError(resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage)
	}
	return out, nil
}

// DescribeClientQuotas lists the entities req's filter selects and their
// quotas, as one broker's metadata holds them, ordered by user then
// client id (absent, then default, then names).
func (c *Client) DescribeClientQuotas(ctx context.Context, req *sluicev1.DescribeClientQuotasRequest) ([]*sluicev1.ClientQuotaEntry, error) {
	var resp *sluicev1.DescribeClientQuotasResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DescribeClientQuotas(ctx, req)
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("describe client quotas: %w", err)
	}
	if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return nil, fmt.Errorf("describe client quotas: %w", err)
	}
	return resp.Entries, nil
}
