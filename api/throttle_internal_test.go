package api

import (
	"testing"

	"github.com/sluice-io/sluice/auth"
)

// The RPCs the request quota times as a whole (RequestQuotaInterceptor)
// are public RPCs, and not those that time themselves without their waits
// (Produce, ProduceStream, Fetch).
func TestRequestQuotaMethodsArePublicRPCs(t *testing.T) {
	for m := range requestQuotaMethods {
		if _, ok := auth.Operations[m]; !ok {
			t.Errorf("%s is not a public RPC (auth.Operations)", m)
		}
	}
	for _, m := range []string{"/sluice.v1.Log/Produce", "/sluice.v1.Log/ProduceStream", "/sluice.v1.Log/Fetch"} {
		if requestQuotaMethods[m] {
			t.Errorf("%s is timed as a whole: its waits would count as work", m)
		}
	}
}
