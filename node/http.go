package node

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/cluster"
)

func (n *Node) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := n.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		im := n.cache.Image()
		fmt.Fprintf(w, "# HELP sluice_topics Number of topics.\n# TYPE sluice_topics gauge\nsluice_topics %d\n", len(im.Topics))
		fmt.Fprintf(w, "# HELP sluice_metadata_offset Metadata offset applied by this broker.\n# TYPE sluice_metadata_offset gauge\nsluice_metadata_offset %d\n", im.Offset)
		if n.replicas == nil {
			return
		}
		fmt.Fprintf(w, "# HELP sluice_log_end_offset Log end offset per hosted partition.\n# TYPE sluice_log_end_offset gauge\n")
		parts := n.replicas.Replicas()
		slices.SortFunc(parts, func(a, b *cluster.Replica) int {
			if a.Topic != b.Topic {
				if a.Topic < b.Topic {
					return -1
				}
				return 1
			}
			return int(a.Partition - b.Partition)
		})
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_log_end_offset{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.LogEndOffset())
		}
		fmt.Fprintf(w, "# HELP sluice_high_watermark High watermark per hosted partition.\n# TYPE sluice_high_watermark gauge\n")
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_high_watermark{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.HighWatermark())
		}
		fmt.Fprintf(w, "# HELP sluice_producer_ids Producer ids with idempotence state per hosted partition.\n# TYPE sluice_producer_ids gauge\n")
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_producer_ids{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.ProducerCount())
		}
	})
	if n.cfg.FaultInjection {
		n.faults.register(mux)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
