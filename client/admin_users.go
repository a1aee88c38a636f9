package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Users' SCRAM credentials (issue 32; Kafka's AlterUserScramCredentials
// and DescribeUserScramCredentials, KIP-554). A password never leaves the
// client: it is salted here (a random salt, Hi(password, salt,
// iterations) of RFC 5802) and the broker stores only what a server keeps
// of it (docs/security.md).

// ScramUpsertion is the upsertion that stores user's credential for
// mechanism ("SCRAM-SHA-256" or "SCRAM-SHA-512") from password, salted
// with a new random salt and iterations (0: auth.DefaultScramIterations;
// the cluster accepts 4096 to 16384). The password must not be empty.
func ScramUpsertion(user, mechanism, password string, iterations int) (*sluicev1.ScramCredentialUpsertion, error) {
	m, err := auth.ParseScramMechanism(mechanism)
	if err != nil {
		return nil, err
	}
	if password == "" {
		return nil, errors.New("the password is empty")
	}
	if iterations == 0 {
		iterations = auth.DefaultScramIterations
	}
	if iterations < auth.MinScramIterations || iterations > auth.MaxScramIterations {
		return nil, fmt.Errorf("%d iterations: must be within %d..%d", iterations, auth.MinScramIterations, auth.MaxScramIterations)
	}
	salt := auth.NewSalt()
	salted, err := auth.SaltPassword(m, password, salt, iterations)
	if err != nil {
		return nil, err
	}
	return &sluicev1.ScramCredentialUpsertion{Name: user, Mechanism: string(m), Iterations: int32(iterations), Salt: salt, SaltedPassword: salted}, nil
}

// UpsertScramUser stores (or replaces) user's SCRAM credential for
// mechanism from password (ScramUpsertion). The cluster's refusal is an
// *errs.Error: UNACCEPTABLE_CREDENTIAL (a user name the cluster refuses:
// empty, over 255 bytes, with control characters) or
// UNSUPPORTED_SASL_MECHANISM.
func (c *Client) UpsertScramUser(ctx context.Context, user, mechanism, password string, iterations int) error {
	u, err := ScramUpsertion(user, mechanism, password, iterations)
	if err != nil {
		return fmt.Errorf("user %q: %w", user, err)
	}
	res, err := c.AlterUserScramCredentials(ctx, []*sluicev1.ScramCredentialUpsertion{u}, nil)
	if err != nil {
		return err
	}
	return res[user]
}

// DeleteScramUser deletes user's SCRAM credential for mechanism; the user
// is gone once it has none. A credential the user does not have is
// RESOURCE_NOT_FOUND (an *errs.Error).
func (c *Client) DeleteScramUser(ctx context.Context, user, mechanism string) error {
	res, err := c.AlterUserScramCredentials(ctx, nil, []*sluicev1.ScramCredentialDeletion{{Name: user, Mechanism: mechanism}})
	if err != nil {
		return err
	}
	return res[user]
}

// AlterUserScramCredentials sends upsertions (made by ScramUpsertion)
// and deletions in one request. Each user's alterations are made all or
// none: the map has one entry per user named, nil when they were made,
// else the reason as an *errs.Error (UNACCEPTABLE_CREDENTIAL,
// UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND for a deletion of a
// credential the user does not have, INVALID_REQUEST for a mechanism
// named twice for the user). The error is for the request as a whole.
// Once it returns, the broker that answered holds the changes; the other
// brokers follow within moments.
func (c *Client) AlterUserScramCredentials(ctx context.Context, upsertions []*sluicev1.ScramCredentialUpsertion, deletions []*sluicev1.ScramCredentialDeletion) (map[string]error, error) {
	var resp *sluicev1.AlterUserScramCredentialsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).AlterUserScramCredentials(ctx, &sluicev1.AlterUserScramCredentialsRequest{
			Upsertions: upsertions, Deletions: deletions, TimeoutMs: c.adminTimeoutMs(ctx),
		})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("alter user SCRAM credentials: %w", err)
	}
	out := make(map[string]error, len(resp.Results))
	for _, r := range resp.Results {
		out[r.User] = codeError(r.ErrorCode, r.ErrorMessage)
	}
	for _, u := range upsertions {
		if _, ok := out[u.Name]; !ok {
			out[u.Name] = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for user %q in the response", u.Name)
		}
	}
	for _, d := range deletions {
		if _, ok := out[d.Name]; !ok {
			out[d.Name] = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for user %q in the response", d.Name)
		}
	}
	return out, nil
}

// DescribeScramUsers lists users' SCRAM mechanisms and iteration counts
// (never a key or a salt), as one broker's metadata holds them: the users
// named, in that order, or (none named) every user that has a
// credential, by name. A named user without any credential has the error
// code RESOURCE_NOT_FOUND in its entry.
func (c *Client) DescribeScramUsers(ctx context.Context, users ...string) ([]*sluicev1.UserScramCredentials, error) {
	var resp *sluicev1.DescribeUserScramCredentialsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DescribeUserScramCredentials(ctx, &sluicev1.DescribeUserScramCredentialsRequest{Users: users})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("describe user SCRAM credentials: %w", err)
	}
	return resp.Users, nil
}
