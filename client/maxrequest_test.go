package client

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestSplitRequests(t *testing.T) {
	mk := func(sizes ...int) []*recordBatch {
		var out []*recordBatch
		for _, s := range sizes {
			out = append(out, &recordBatch{size: s})
		}
		return out
	}
	sizes := func(reqs [][]*recordBatch) [][]int {
		var out [][]int
		for _, r := range reqs {
			var s []int
			for _, b := range r {
				s = append(s, b.size)
			}
			out = append(out, s)
		}
		return out
	}
	cases := []struct {
		name  string
		in    []int
		limit int
		want  [][]int
	}{
		{"all fit", []int{10, 20, 30}, 100, [][]int{{10, 20, 30}}},
		{"exact fit", []int{50, 50}, 100, [][]int{{50, 50}}},
		{"split", []int{60, 50, 40, 70}, 100, [][]int{{60}, {50, 40}, {70}}},
		{"oversized batch alone", []int{150, 10}, 100, [][]int{{150}, {10}}},
		{"one batch", []int{5}, 100, [][]int{{5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sizes(splitRequests(mk(tc.in...), tc.limit)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMaxRequestBytes(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.NewProducer(WithBatchBytes(64<<10), WithMaxRequestBytes(16<<10)); err == nil {
		t.Error("batch bytes above max request bytes accepted")
	}
	if _, err := c.NewProducer(WithMaxRequestBytes(10)); err == nil {
		t.Error("max request bytes of 10 accepted")
	}
	p, err := c.NewProducer(WithBatchBytes(4<<10), WithMaxRequestBytes(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: bytes.Repeat([]byte("x"), 9<<10)})
	if errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
		t.Fatalf("record above max request bytes: %v, want MESSAGE_TOO_LARGE", err)
	}
	if md, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("small")}); err != nil || md.Offset != 0 {
		t.Fatalf("small record: %+v %v", md, err)
	}
}
