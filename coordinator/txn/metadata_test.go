package txn

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestValidateTransactionalID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want sluicev1.ErrorCode
	}{
		{"", sluicev1.ErrorCode_INVALID_REQUEST},
		{" ", sluicev1.ErrorCode_NONE},
		{"u12-txn", sluicev1.ErrorCode_NONE},
		{"日本語", sluicev1.ErrorCode_NONE},
		{strings.Repeat("x", MaxTransactionalIDBytes), sluicev1.ErrorCode_NONE},
		{strings.Repeat("x", MaxTransactionalIDBytes+1), sluicev1.ErrorCode_INVALID_REQUEST},
		// 10923 three-byte runes = 32769 bytes: the limit is in bytes.
		{strings.Repeat("語", 10923), sluicev1.ErrorCode_INVALID_REQUEST},
		{"bad\xffutf8", sluicev1.ErrorCode_INVALID_REQUEST},
	} {
		if got := errs.Code(ValidateTransactionalID(tc.id)); got != tc.want {
			t.Errorf("ValidateTransactionalID(%.20q… %d bytes) = %v, want %v", tc.id, len(tc.id), got, tc.want)
		}
	}
}

// Kafka's validateTransactionTimeoutMs: 0 < timeout ≤ transaction.max.timeout.ms.
func TestValidateTimeout(t *testing.T) {
	const bad = sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT
	for _, tc := range []struct {
		ms   int32
		max  time.Duration
		want sluicev1.ErrorCode
	}{
		{-1, 0, bad},
		{0, 0, bad},
		{1, 0, sluicev1.ErrorCode_NONE},
		{60000, 0, sluicev1.ErrorCode_NONE},
		{900000, 0, sluicev1.ErrorCode_NONE}, // the 15 min default max itself
		{900001, 0, bad},
		{60000, time.Minute, sluicev1.ErrorCode_NONE},
		{60001, time.Minute, bad},
		{1 << 30, 0, bad},
	} {
		if got := errs.Code(ValidateTimeout(tc.ms, tc.max)); got != tc.want {
			t.Errorf("ValidateTimeout(%d, %v) = %v, want %v", tc.ms, tc.max, got, tc.want)
		}
	}
}
