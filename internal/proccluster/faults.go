package proccluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FaultRule is one rule of sluiced's /debug/faults (--fault-injection;
// node.FaultRule is the server's side).
type FaultRule struct {
	Method          string  `json:"method"`
	DropResponse    float64 `json:"drop_response,omitempty"`
	DelayResponseMs int64   `json:"delay_response_ms,omitempty"`
	FailRequest     float64 `json:"fail_request,omitempty"`
	DelayRequestMs  int64   `json:"delay_request_ms,omitempty"`
}

// PutFaultRules replaces the fault rules of the node whose HTTP listener
// is httpAddr; nil clears them. It is bounded by 2 s.
func PutFaultRules(httpAddr string, rules []FaultRule) error {
	url := "http://" + httpAddr + "/debug/faults"
	var req *http.Request
	var err error
	if rules == nil {
		req, err = http.NewRequest(http.MethodDelete, url, nil)
	} else {
		body, _ := json.Marshal(map[string]any{"rules": rules})
		req, err = http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	}
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("proccluster: %s %s: %w", req.Method, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("proccluster: %s %s: %s: %s", req.Method, url, resp.Status, strings.TrimSpace(b.String()))
	}
	return nil
}
