package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The one append-error map (Kafka's GroupCoordinatorService and
// TransactionStateManager); both coordinators answer through it.
func TestAppendError(t *testing.T) {
	for in, want := range map[sluicev1.ErrorCode]sluicev1.ErrorCode{
		sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:       sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS:              sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND: sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_REQUEST_TIMED_OUT:                sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER:           sluicev1.ErrorCode_NOT_COORDINATOR,
		sluicev1.ErrorCode_FENCED_LEADER_EPOCH:              sluicev1.ErrorCode_NOT_COORDINATOR,
		sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH:             sluicev1.ErrorCode_NOT_COORDINATOR,
		sluicev1.ErrorCode_KAFKA_STORAGE_ERROR:              sluicev1.ErrorCode_NOT_COORDINATOR,
		sluicev1.ErrorCode_MESSAGE_TOO_LARGE:                sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR,
		sluicev1.ErrorCode_RECORD_LIST_TOO_LARGE:            sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR,
		sluicev1.ErrorCode_INVALID_FETCH_SIZE:               sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR,
		sluicev1.ErrorCode_CORRUPT_RECORD:                   sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
	} {
		err := AppendError("group", "g", "__consumer_offsets", errs.New(in, "append failed"))
		if got := errs.Code(err); got != want {
			t.Errorf("%v → %v, want %v", in, got, want)
		}
		if !MappedAppendError(errs.New(in, "x")) && in != sluicev1.ErrorCode_CORRUPT_RECORD {
			t.Errorf("%v is mapped but MappedAppendError says no", in)
		}
	}
}

// fakeLog has one batch per partition and appends whose outcome the test
// chooses.
type fakeLog struct {
	mu        sync.Mutex
	appendErr error
	committed chan struct{} // WaitCommitted returns nil once closed
}

func (l *fakeLog) AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, epoch int32, now time.Time) (cluster.AppendResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return cluster.AppendResult{BaseOffset: 5, LastOffset: 6}, l.appendErr
}

func (l *fakeLog) WaitCommitted(ctx context.Context, tp cluster.TopicPartition, epoch int32, last int64) error {
	select {
	case <-l.committed:
		return nil
	case <-ctx.Done():
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%v; %w", ctx.Err(), cluster.ErrCommitUnknown)
	}
}

func (l *fakeLog) ReadForLoad(ctx context.Context, tp cluster.TopicPartition, epoch int32, offset int64, maxBytes int) (LogRead, error) {
	if offset == 0 {
		return LogRead{Batches: [][]byte{[]byte("b")}, NextOffset: 1, EndOffset: 1}, nil
	}
	return LogRead{NextOffset: 1, EndOffset: 1}, nil
}

type shard struct {
	*Partition
	applied []int64
	loaded  int64
}

type loader struct{ s *shard }

func (l loader) Replay(b []byte, skip func(int64, error)) error {
	skip(0, errors.New("bad"))
	return nil
}
func (l loader) Done(end int64) { l.s.loaded = end }

func newTestRuntime(t *testing.T, log *fakeLog) (*Runtime[*shard], *sync.Mutex) {
	var mu sync.Mutex
	var g goroutine.Group
	r := New(Config[*shard]{Name: "test", Topic: "__t", KeyKind: "key", Partitions: 1, Log: log,
		NewShard:  func(p *Partition) *shard { return &shard{Partition: p} },
		NewLoader: func(s *shard) Loader { return loader{s} },
		Mu:        &mu, Goroutines: &g, AppendTimeout: 50 * time.Millisecond, RetryBackoff: time.Millisecond})
	t.Cleanup(func() { _ = r.Close() })
	return r, &mu
}

func route(r *Runtime[*shard], mu *sync.Mutex, key string) (*shard, error) {
	mu.Lock()
	defer mu.Unlock()
	return r.RouteLocked(key)
}

func TestLeadLoadRouteResolveClose(t *testing.T) {
	log := &fakeLog{committed: make(chan struct{})}
	r, mu := newTestRuntime(t, log)
	if _, err := route(r, mu, "k"); errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("before leading: %v, want NOT_COORDINATOR", err)
	}
	tp := cluster.TopicPartition{Topic: "__t", Partition: 0}
	r.BecameLeader(cluster.TopicPartition{Topic: "other"}, 1) // not its topic
	r.BecameLeader(tp, 3)
	var s *shard
	wait.For(t, 5*time.Second, "the partition loaded", func() error {
		var err error
		s, err = route(r, mu, "k")
		if err != nil && errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS {
			t.Fatalf("while loading: %v, want COORDINATOR_LOAD_IN_PROGRESS", err)
		}
		return err
	})
	if s.Epoch != 3 || s.loaded != 1 || r.SkippedRecords() != 1 {
		t.Fatalf("loaded shard: epoch %d, end %d, skipped %d", s.Epoch, s.loaded, r.SkippedRecords())
	}

	// Commit unknown: the requester gets COORDINATOR_NOT_AVAILABLE, the
	// resolver applies once the batch commits.
	log.mu.Lock()
	log.appendErr = errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "slow; %w", cluster.ErrCommitUnknown)
	log.mu.Unlock()
	applied := make(chan int64, 1)
	err := r.AppendThenApply(context.Background(), s, "k", []byte("x"), func(base int64) error { applied <- base; return nil }, nil)
	if errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
		t.Fatalf("commit unknown: %v", err)
	}
	close(log.committed)
	select {
	case base := <-applied:
		if base != 5 {
			t.Fatalf("applied at %d, want 5", base)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the resolver never applied")
	}

	// A failed append abandons and maps.
	log.mu.Lock()
	log.appendErr = errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "moved")
	log.mu.Unlock()
	abandoned := false
	err = r.AppendThenApply(context.Background(), s, "k", []byte("x"), func(int64) error { t.Fatal("applied"); return nil }, func() { abandoned = true })
	if errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR || !abandoned {
		t.Fatalf("failed append: %v, abandoned %v", err, abandoned)
	}

	r.Resigned(tp, 2) // another epoch: ignored
	if _, err := route(r, mu, "k"); err != nil {
		t.Fatalf("after a Resigned of another epoch: %v", err)
	}
	r.Resigned(tp, 3)
	if _, err := route(r, mu, "k"); errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("after Resigned: %v", err)
	}
	if s.Ctx.Err() == nil {
		t.Fatal("the resigned partition's context is still live")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r.BecameLeader(tp, 4)
	if _, err := route(r, mu, "k"); errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("after Close: %v", err)
	}
}
