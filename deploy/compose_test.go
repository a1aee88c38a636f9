package deploy

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-io/sluice/node"
)

// composeService is the part of a compose service that compose.yaml uses;
// strict decoding fails on anything else.
type composeService struct {
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Image           string            `json:"image"`
	Hostname        string            `json:"hostname"`
	StopGracePeriod string            `json:"stop_grace_period"`
	Restart         string            `json:"restart"`
	Environment     map[string]string `json:"environment"`
	Command         []string          `json:"command"`
	Volumes         []string          `json:"volumes"`
}

type composeFile struct {
	Name     string                    `json:"name"`
	XNode    composeService            `json:"x-node"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

// compose.yaml parses; every service builds deploy/Dockerfile, passes only
// sluiced flags (as arguments and SLUICE_* variables), keeps its data in a
// volume at the image's data dir, and the quorum and seeds name the
// services with their node ids and ports.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.UnmarshalStrict(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(cf.Services) != 3 {
		t.Fatalf("%d services, want 3", len(cf.Services))
	}
	flags := sluicedFlags(t)
	ids := map[string]int32{} // service -> node id
	for name, s := range cf.Services {
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Context != ".." {
			t.Errorf("%s: build %+v, want context .. and deploy/Dockerfile", name, s.Build)
		}
		for _, a := range s.Command {
			f, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !flags[f] {
				t.Errorf("%s: argument %q is not a sluiced flag", name, a)
			}
		}
		for k := range s.Environment {
			if f := flagOfEnv(k); f == "" || !flags[f] {
				t.Errorf("%s: %s sets no sluiced flag", name, k)
			}
		}
		if !slices.Contains(s.Volumes, "data-"+strings.TrimPrefix(name, "sluice-")+":/var/lib/sluice") {
			t.Errorf("%s: volumes %q, want its own volume at /var/lib/sluice", name, s.Volumes)
		}
		id, ok := flagValue(s.Command, "node-id")
		n, err := strconv.Atoi(id)
		if !ok || err != nil {
			t.Fatalf("%s: --node-id %q", name, id)
		}
		ids[name] = int32(n)
		if adv, _ := flagValue(s.Command, "advertise"); adv != name+":9400" {
			t.Errorf("%s: advertises %q, want %s:9400", name, adv, name)
		}
		if adv, _ := flagValue(s.Command, "internal-advertise"); adv != name+":9404" {
			t.Errorf("%s: advertises its internal listener as %q, want %s:9404", name, adv, name)
		}
		if adv, _ := flagValue(s.Command, "kafka-advertise"); adv != name+":9092" {
			t.Errorf("%s: advertises its Kafka listener as %q, want %s:9092", name, adv, name)
		}
	}
	for name, s := range cf.Services {
		voters, err := node.ParseVoters(s.Environment["SLUICE_CONTROLLER_VOTERS"])
		if err != nil || len(voters) != len(cf.Services) {
			t.Fatalf("%s: voters %q: %v", name, s.Environment["SLUICE_CONTROLLER_VOTERS"], err)
		}
		for _, v := range voters {
			host, port, _ := net.SplitHostPort(v.Address)
			if id, ok := ids[host]; !ok || id != v.ID || port != "9401" {
				t.Errorf("%s: voter %d@%s is not a service with that node id and Raft port 9401", name, v.ID, v.Address)
			}
		}
		for _, seed := range node.ParseList(s.Environment["SLUICE_JOIN"]) {
			host, port, _ := net.SplitHostPort(seed)
			if _, ok := ids[host]; !ok || port != "9402" {
				t.Errorf("%s: seed %s is not a service's gossip port", name, seed)
			}
		}
		if want := fmt.Sprintf("0.0.0.0:%d", 9400); s.Environment["SLUICE_LISTEN"] != want {
			t.Errorf("%s: SLUICE_LISTEN %q, want %s", name, s.Environment["SLUICE_LISTEN"], want)
		}
		if want := fmt.Sprintf("0.0.0.0:%d", 9404); s.Environment["SLUICE_INTERNAL_LISTEN"] != want {
			t.Errorf("%s: SLUICE_INTERNAL_LISTEN %q, want %s", name, s.Environment["SLUICE_INTERNAL_LISTEN"], want)
		}
		if want := fmt.Sprintf("0.0.0.0:%d", 9092); s.Environment["SLUICE_KAFKA_LISTEN"] != want {
			t.Errorf("%s: SLUICE_KAFKA_LISTEN %q, want %s", name, s.Environment["SLUICE_KAFKA_LISTEN"], want)
		}
	}
}
