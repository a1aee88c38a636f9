package client

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// pagingAdmin answers Metadata listings of topics "a".."e" two a page,
// or, when stuck, the page token it was sent; it records the tokens.
type pagingAdmin struct {
	sluicev1.UnimplementedAdminServer
	stuck  bool
	mu     sync.Mutex // guards tokens
	tokens []string
}

func (f *pagingAdmin) Metadata(_ context.Context, req *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	f.mu.Lock()
	f.tokens = append(f.tokens, req.PageToken)
	f.mu.Unlock()
	all := []string{"a", "b", "c", "d", "e"}
	i := 0
	for i < len(all) && all[i] < req.PageToken {
		i++
	}
	resp := &sluicev1.MetadataResponse{}
	for _, n := range all[i:min(i+2, len(all))] {
		resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: n})
	}
	if i+2 < len(all) {
		resp.NextPageToken = all[i+2]
	}
	if f.stuck && req.PageToken != "" {
		resp.NextPageToken = req.PageToken
	}
	return resp, nil
}

// MetadataPages follows next_page_token to the last page, and stops with
// an error when a broker answers the token it was sent (no progress).
func TestMetadataPagesFollowsTokens(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &pagingAdmin{stuck: stuck}
		s := grpc.NewServer()
		sluicev1.RegisterAdminServer(s, f)
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Serve(l) }()
		c, err := New([]string{l.Addr().String()}, WithRequestTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var lastErr error
		for page, err := range c.MetadataPages(context.Background(), &sluicev1.MetadataRequest{PageSize: 2}) {
			if err != nil {
				lastErr = err
				break
			}
			for _, tm := range page.Topics {
				names = append(names, tm.Name)
			}
		}
		c.Close()
		s.Stop()
		<-done
		f.mu.Lock()
		tokens := strings.Join(f.tokens, ",")
		f.mu.Unlock()
		switch {
		case !stuck && (lastErr != nil || strings.Join(names, "") != "abcde" || tokens != ",c,e"):
			t.Errorf("paging: %v, topics %v, tokens %q", lastErr, names, tokens)
		case stuck && (lastErr == nil || !strings.Contains(lastErr.Error(), `answered page token "c" again`) || strings.Join(names, "") != "ab"):
			t.Errorf("stuck broker: %v, topics %v, tokens %q", lastErr, names, tokens)
		}
	}
}
