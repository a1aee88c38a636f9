package api

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sluice-io/sluice/auth"
	_ "github.com/sluice-io/sluice/proto/sluicev1"
)

// Every public RPC is in the operation table (auth.Operations) or named
// open (auth.Open), and the table names no RPC that does not exist: a new
// RPC cannot ship unauthorized by being forgotten. Each service's own test
// (TestAuthorizationLogAdmin, TestTransactionsAndGroupsAuthorization)
// then checks every entry allowed and denied.
func TestEveryPublicRPCIsInTheOperationTable(t *testing.T) {
	var methods []string
	protoregistry.GlobalFiles.RangeFilesByPackage("sluice.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				methods = append(methods, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(methods) < 25 {
		t.Fatalf("only %d public methods found: %v", len(methods), methods)
	}
	for _, m := range methods {
		_, listed := auth.Operations[m]
		if !listed && !slices.Contains(auth.Open, m) {
			t.Errorf("%s is neither in auth.Operations nor in auth.Open", m)
		}
		if listed && slices.Contains(auth.Open, m) {
			t.Errorf("%s is both in auth.Operations and in auth.Open", m)
		}
	}
	for m := range auth.Operations {
		if !slices.Contains(methods, m) {
			t.Errorf("auth.Operations names %s, which is no public RPC", m)
		}
	}
}
