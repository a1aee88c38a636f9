package node

import (
	"net/http"
	"net/http/pprof"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func (n *Node) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := n.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			// Say why, one reason a line (NotReadyReasons), so that an
			// operator reading the probe's answer knows what to fix.
			msg := "not ready"
			if n.ctx.Err() != nil {
				msg += "\nshutting down"
			} else {
				for _, reason := range n.NotReadyReasons() {
					msg += "\n" + reason
				}
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("/metrics", n.metrics.handler(n.log))
	n.registerFaults(mux) // /debug/faults: sluicetest builds with FaultInjection only
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
