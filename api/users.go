package api

import (
	"context"
	"slices"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Users' SCRAM credentials (issue 32; Kafka's AlterUserScramCredentials
// and DescribeUserScramCredentials, KIP-554). A client salts the password
// itself (SaltedPassword = Hi(password, salt, iterations)) and sends the
// salted password; the broker forwards the request to the active
// controller over the internal listener (mutual TLS in a TLS cluster), and
// the controller service below turns each salted password into StoredKey
// and ServerKey (auth.NewScramCredential) before anything is proposed. So
// the metadata log, its snapshots and the metadata stream hold the salt,
// the iteration count and the two keys, never the password or the
// salted password (which, unlike the keys, lets its holder authenticate).

// AlterUserScramCredentials implements the Controller service. Each
// upsertion's credential is derived here (scramCredential): an unknown
// mechanism is UNSUPPORTED_SASL_MECHANISM, an iteration count, salt or
// salted password that auth refuses UNACCEPTABLE_CREDENTIAL, and refuses
// the user's every alteration; the others go to the controller
// (controller.AlterUserScramCredentials), which makes each user's
// alterations all or none. One result per user, in the order first named
// (deletions, then upsertions); NOT_CONTROLLER and an expired request are
// gRPC errors.
func (s *ControllerService) AlterUserScramCredentials(ctx context.Context, req *sluicev1.AlterUserScramCredentialsRequest) (*internalv1.ControllerAlterUserScramCredentialsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	var order []string
	named := map[string]bool{}
	name := func(user string) {
		if !named[user] {
			named[user] = true
			order = append(order, user)
		}
	}
	refused := map[string]error{} // by the derivation, the first reason per user
	deletions := make([]controller.RemoveUserScramCredential, 0, len(req.Deletions))
	for _, d := range req.Deletions {
		name(d.Name)
		deletions = append(deletions, controller.RemoveUserScramCredential{User: d.Name, Mechanism: d.Mechanism})
	}
	upserts := make([]controller.UserScramCredential, 0, len(req.Upsertions))
	for _, u := range req.Upsertions {
		name(u.Name)
		rec, err := scramCredential(u)
		if err != nil {
			if refused[u.Name] == nil {
				refused[u.Name] = err
			}
			continue
		}
		upserts = append(upserts, rec)
	}
	// A user refused here sends none of its alterations on.
	deletions = slices.DeleteFunc(deletions, func(r controller.RemoveUserScramCredential) bool { return refused[r.User] != nil })
	upserts = slices.DeleteFunc(upserts, func(r controller.UserScramCredential) bool { return refused[r.User] != nil })
	results, offset, err := s.ctl.AlterUserScramCredentials(ctx, upserts, deletions)
	if err != nil {
		return nil, s.status(err)
	}
	outcome := make(map[string]error, len(results))
	for _, r := range results {
		outcome[r.User] = r.Err
	}
	resp := &sluicev1.AlterUserScramCredentialsResponse{Results: make([]*sluicev1.AlterUserScramCredentialsResult, 0, len(order))}
	for _, user := range order {
		r := &sluicev1.AlterUserScramCredentialsResult{User: user}
		err := refused[user]
		if err == nil {
			err = outcome[user]
		}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = errs.Code(err), errs.Message(err)
		}
		resp.Results = append(resp.Results, r)
	}
	return &internalv1.ControllerAlterUserScramCredentialsResponse{Response: resp, MetadataOffset: offset}, nil
}

// scramCredential derives u's credential record from its salted password
// (which goes no further). Errors: UNSUPPORTED_SASL_MECHANISM,
// UNACCEPTABLE_CREDENTIAL.
func scramCredential(u *sluicev1.ScramCredentialUpsertion) (controller.UserScramCredential, error) {
	m, err := auth.ParseScramMechanism(u.Mechanism)
	if err != nil {
		return controller.UserScramCredential{}, errs.New(sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM,
			"user %q: SASL mechanism %q is not served: %s or %s", errs.Echo(u.Name), errs.Echo(u.Mechanism), auth.ScramSHA256, auth.ScramSHA512)
	}
	c, err := auth.NewScramCredential(m, int(u.Iterations), u.Salt, u.SaltedPassword)
	if err != nil {
		return controller.UserScramCredential{}, errs.New(sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL, "user %q: %s: %v", errs.Echo(u.Name), m, err)
	}
	return controller.UserScramCredential{User: u.Name, Mechanism: string(c.Mechanism), Iterations: c.Iterations,
		Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey}, nil
}

// AlterUserScramCredentials forwards the alterations to the active
// controller (the request as received: the controller service derives
// the keys), then waits until this broker's image holds them, so a
// DescribeUserScramCredentials sent here next shows them and this broker
// authenticates with them. Per-user refusals are in the response;
// NOT_CONTROLLER and timeouts are request errors. The request is never
// logged: its salted passwords are as good as the passwords. It needs
// ALTER on the cluster (else PERMISSION_DENIED, nothing forwarded).
func (s *Server) AlterUserScramCredentials(ctx context.Context, req *sluicev1.AlterUserScramCredentialsRequest) (*sluicev1.AlterUserScramCredentialsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if len(req.Deletions) == 0 && len(req.Upsertions) == 0 {
		return &sluicev1.AlterUserScramCredentialsResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerAlterUserScramCredentialsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.AlterUserScramCredentials(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT,
			"the controller answered but broker %d has not seen the credentials altered yet: %v", s.self.NodeID, err)
	}
	for _, r := range out.Response.Results {
		if r.ErrorCode == sluicev1.ErrorCode_NONE {
			s.log.Info("user SCRAM credentials altered", "user", r.User)
		}
	}
	return out.Response, nil
}

// DescribeUserScramCredentials answers from this broker's metadata image:
// each user's mechanisms and iteration counts, never a salt or a key.
// With no user named, every user that has a credential, by name; a named
// user without one is answered RESOURCE_NOT_FOUND. A broker without
// metadata yet answers LEADER_NOT_AVAILABLE rather than "no such user".
// It needs DESCRIBE on the cluster (else PERMISSION_DENIED).
func (s *Server) DescribeUserScramCredentials(ctx context.Context, req *sluicev1.DescribeUserScramCredentialsRequest) (*sluicev1.DescribeUserScramCredentialsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpDescribe, auth.Cluster); err != nil {
		return nil, err
	}
	if err := s.metadataLoaded(); err != nil {
		return nil, errs.Status(err, nil)
	}
	im := s.cache.Image()
	users := req.Users
	if len(users) == 0 {
		users = im.UserNames()
	}
	resp := &sluicev1.DescribeUserScramCredentialsResponse{Users: make([]*sluicev1.UserScramCredentials, 0, len(users))}
	for _, user := range users {
		u := &sluicev1.UserScramCredentials{User: user}
		for _, m := range im.ScramMechanisms(user) {
			c, _ := im.ScramCredential(user, m)
			u.Credentials = append(u.Credentials, &sluicev1.ScramCredentialInfo{Mechanism: m, Iterations: int32(c.Iterations)})
		}
		if len(u.Credentials) == 0 {
			u.ErrorCode = sluicev1.ErrorCode_RESOURCE_NOT_FOUND
		}
		resp.Users = append(resp.Users, u)
	}
	return resp, nil
}
