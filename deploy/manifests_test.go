package deploy

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/sluice-io/sluice/node"
)

// sluicedShutdownBound is how long sluiced takes at most from SIGTERM to
// exit: cmd/sluiced's run bounds the graceful shutdown (controlled
// shutdown, drain, Raft hand-off) at 30 s.
const sluicedShutdownBound = 30

// Every overlay renders with kustomize, and every object decodes strictly
// into the Kubernetes API types (an unknown or misspelt field fails).
func TestOverlaysRenderAndDecodeStrictly(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			if len(m.StatefulSets) == 0 || len(m.Services) != 2 || len(m.ConfigMaps) != 1 || len(m.PDBs) != len(m.StatefulSets) || len(m.NetworkPolicies) != 1 {
				t.Fatalf("%d StatefulSets, %d Services, %d ConfigMaps, %d PodDisruptionBudgets, %d NetworkPolicies; want >= 1, 2, 1, one per StatefulSet, 1",
					len(m.StatefulSets), len(m.Services), len(m.ConfigMaps), len(m.PDBs), len(m.NetworkPolicies))
			}
		})
	}
}

// The strict decoding is strict: a field the API types lack fails.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	fSys := copyToMemory(t, "kubernetes")
	path := "/kubernetes/node/statefulset.yaml"
	b, err := fSys.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "  podManagementPolicy: Parallel", "  podManagementPolicy: Parallel\n  podManagmentPolicy: Parallel", 1)
	if err := fSys.WriteFile(path, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	_, err = render(fSys, "/kubernetes/overlays/combined")
	if err == nil || !strings.Contains(err.Error(), "podManagmentPolicy") {
		t.Fatalf("a misspelt field was accepted: %v", err)
	}
}

// Every flag the manifests give sluiced, as an argument or as a SLUICE_*
// variable (env or the ConfigMap), is one that sluiced --help lists, and
// the command is the binary's path in the image.
func TestManifestFlagsExistInSluiced(t *testing.T) {
	flags := sluicedFlags(t)
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				c := sts.Spec.Template.Spec.Containers[0]
				if len(c.Command) != 1 || c.Command[0] != imageSluiced {
					t.Errorf("%s: command %q, want [%s] (the image's binary)", sts.Name, c.Command, imageSluiced)
				}
				for _, a := range c.Args {
					f, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
					if !strings.HasPrefix(a, "--") || !flags[f] {
						t.Errorf("%s: argument %q is not a sluiced flag", sts.Name, a)
					}
				}
				for _, e := range c.Env {
					if f := flagOfEnv(e.Name); f != "" && !flags[f] {
						t.Errorf("%s: env %s sets no sluiced flag (no --%s)", sts.Name, e.Name, f)
					}
				}
			}
			for _, cm := range m.ConfigMaps {
				for k := range cm.Data {
					if f := flagOfEnv(k); f == "" || !flags[f] {
						t.Errorf("ConfigMap %s: %s is not SLUICE_<flag> of a sluiced flag", cm.Name, k)
					}
				}
			}
		})
	}
}

// listenPort returns the port of a pod's listen flag, which must bind
// every interface (the pod's network namespace is its own).
func listenPort(t *testing.T, p pod, flag string) int32 {
	t.Helper()
	v, ok := p.setting(flag)
	if !ok {
		t.Fatalf("%s: no --%s", p.Name, flag)
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		t.Fatalf("%s: --%s=%s: %v", p.Name, flag, v, err)
	}
	if host != "0.0.0.0" {
		t.Errorf("%s: --%s=%s binds %s, want 0.0.0.0", p.Name, flag, v, host)
	}
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// The ports: the container ports are the ones sluiced listens on, the
// probes ask gRPC health on the client gRPC port (service "liveness" for
// startup and liveness, "" for readiness) or, where that port speaks TLS,
// the HTTP port's /healthz and /readyz (checkProbes), and the Services'
// target ports name container ports with those numbers. The headless Service, through
// which the pods reach each other, has the internal gRPC port; the client
// Service must not (decision 41: the inter-node services are not for
// clients). Both have the Kafka port (issue 34): Kafka clients bootstrap
// from the client Service and reach each broker under the headless one.
func TestManifestPortsMatchFlagsProbesAndServices(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				p := podOf(t, m, sts, 0, "default", "10.0.0.1")
				c := sts.Spec.Template.Spec.Containers[0]
				want := map[string]int32{
					"grpc": listenPort(t, p, "listen"), "raft": listenPort(t, p, "raft-listen"),
					"gossip-tcp": listenPort(t, p, "gossip-listen"), "gossip-udp": listenPort(t, p, "gossip-listen"),
					"http": listenPort(t, p, "http-listen"), "internal": listenPort(t, p, "internal-listen"),
					"kafka": listenPort(t, p, "kafka-listen"),
				}
				ports := map[string]corev1.ContainerPort{}
				for _, cp := range c.Ports {
					ports[cp.Name] = cp
				}
				for pn, n := range want {
					cp, ok := ports[pn]
					if !ok || cp.ContainerPort != n {
						t.Errorf("%s: container port %s = %+v, want %d", sts.Name, pn, cp, n)
					}
				}
				if ports["gossip-udp"].Protocol != corev1.ProtocolUDP {
					t.Errorf("%s: gossip-udp is not UDP", sts.Name)
				}
				checkProbes(t, p, c, want)
				for _, svc := range m.Services {
					if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
						continue
					}
					headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
					internal, kafka := false, false
					for _, sp := range svc.Spec.Ports {
						cp, ok := ports[sp.TargetPort.String()]
						if !ok || cp.ContainerPort != sp.Port || protocol(cp.Protocol) != protocol(sp.Protocol) {
							t.Errorf("Service %s port %s (%d/%s, target %s) does not match a container port of %s", svc.Name, sp.Name, sp.Port, protocol(sp.Protocol), sp.TargetPort.String(), sts.Name)
						}
						if sp.TargetPort.String() == "internal" || sp.Port == want["internal"] || sp.TargetPort.IntValue() == int(want["internal"]) {
							internal = true
						}
						kafka = kafka || ports[sp.TargetPort.String()].ContainerPort == want["kafka"] && sp.Port == want["kafka"]
					}
					if !kafka {
						t.Errorf("Service %s has no Kafka port %d: Kafka clients could not reach %s", svc.Name, want["kafka"], sts.Name)
					}
					switch {
					case headless && !internal:
						t.Errorf("headless Service %s has no internal gRPC port: the pods could not call each other", svc.Name)
					case !headless && internal:
						t.Errorf("client Service %s exposes the internal gRPC port %d", svc.Name, want["internal"])
					}
				}
			}
		})
	}
}

// checkProbes checks the probes of p's container c against the ports
// sluiced listens on (want, by container port name). The kubelet's gRPC
// probes speak plaintext only: with TLS on the client port (--tls-cert-file)
// the probes must be HTTP GETs on the HTTP port, /healthz for startup and
// liveness (200 while the process serves, as health service "liveness"),
// /readyz for readiness (as health service ""), over HTTPS exactly when
// sluiced serves HTTP over TLS (--http-tls).
func checkProbes(t *testing.T, p pod, c corev1.Container, want map[string]int32) {
	t.Helper()
	_, clientTLS := p.setting("tls-cert-file")
	httpTLS, _ := p.setting("http-tls")
	scheme := corev1.URISchemeHTTP
	if b, _ := strconv.ParseBool(httpTLS); b {
		scheme = corev1.URISchemeHTTPS
	}
	probes := []struct {
		what    string
		probe   *corev1.Probe
		service string // gRPC health service
		path    string // HTTP path
	}{
		{"startup", c.StartupProbe, node.LivenessService, "/healthz"},
		{"liveness", c.LivenessProbe, node.LivenessService, "/healthz"},
		{"readiness", c.ReadinessProbe, "", "/readyz"},
	}
	for _, pr := range probes {
		switch {
		case pr.probe == nil:
			t.Errorf("%s: no %s probe", p.Name, pr.what)
		case clientTLS:
			g := pr.probe.HTTPGet
			if g == nil {
				t.Errorf("%s: %s probe is not an HTTP probe, and the client port speaks TLS (the kubelet's gRPC probes cannot)", p.Name, pr.what)
				continue
			}
			port := containerPortNumber(c, g.Port)
			gotScheme := g.Scheme
			if gotScheme == "" {
				gotScheme = corev1.URISchemeHTTP
			}
			if port != want["http"] || g.Path != pr.path || gotScheme != scheme {
				t.Errorf("%s: %s probe GETs %s %s on port %d, want %s %s on %d", p.Name, pr.what, gotScheme, g.Path, port, scheme, pr.path, want["http"])
			}
		default:
			if pr.probe.GRPC == nil {
				t.Errorf("%s: %s probe is not a gRPC probe", p.Name, pr.what)
				continue
			}
			svc := ""
			if pr.probe.GRPC.Service != nil {
				svc = *pr.probe.GRPC.Service
			}
			if pr.probe.GRPC.Port != want["grpc"] || svc != pr.service {
				t.Errorf("%s: %s probe asks service %q on port %d, want %q on %d", p.Name, pr.what, svc, pr.probe.GRPC.Port, pr.service, want["grpc"])
			}
		}
	}
}

// containerPortNumber resolves a port given by number or by the name of
// one of c's container ports (0: no such port).
func containerPortNumber(c corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// The StatefulSets: pods found through the headless Service (which
// publishes pods not ready yet), started in parallel, with a volume per pod
// at the data dir, node ids from the ordinal that no two pods share, a PDB
// of maxUnavailable 1 for exactly their pods, a grace period that covers
// the preStop pause and sluiced's shutdown, a non-root read-only security
// context, resource requests and spreading over nodes.
func TestManifestStatefulSets(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			ids := map[int32]string{}
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				checkStatefulSet(t, m, sts)
				for ord := range int(*sts.Spec.Replicas) {
					p := podOf(t, m, sts, ord, "default", "10.0.0.1")
					id := nodeIDOf(t, p)
					if other, dup := ids[id]; dup {
						t.Errorf("node id %d of %s is also %s's", id, p.Name, other)
					}
					ids[id] = p.Name
				}
			}
		})
	}
}

func checkStatefulSet(t *testing.T, m *manifests, sts *appsv1.StatefulSet) {
	t.Helper()
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	headless := m.service(sts.Spec.ServiceName)
	switch {
	case headless == nil:
		t.Errorf("%s: serviceName %s is no Service of the overlay", sts.Name, sts.Spec.ServiceName)
	case headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses:
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want None, true", headless.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("%s: podManagementPolicy %q, want Parallel", sts.Name, sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 1 {
		t.Errorf("%s: no replicas", sts.Name)
	}
	p := podOf(t, m, sts, 0, "default", "10.0.0.1")
	dataDir, _ := p.setting("data-dir")
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			mounted = mounted || (vm.Name == vct.Name && vm.MountPath == dataDir && !vm.ReadOnly)
		}
	}
	if !mounted {
		t.Errorf("%s: the data dir %q is not a volumeClaimTemplate's mount", sts.Name, dataDir)
	}
	var pdbs []string
	for _, pdb := range m.PDBs {
		sel := labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels)
		if !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			continue
		}
		pdbs = append(pdbs, pdb.Name)
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, want 1", pdb.Name, pdb.Spec.MaxUnavailable)
		}
		for j := range m.StatefulSets {
			if o := &m.StatefulSets[j]; o != sts && sel.Matches(labels.Set(o.Spec.Template.Labels)) {
				t.Errorf("PodDisruptionBudget %s covers both %s and %s", pdb.Name, sts.Name, o.Name)
			}
		}
	}
	if len(pdbs) != 1 {
		t.Errorf("%s: PodDisruptionBudgets %v, want exactly one", sts.Name, pdbs)
	}
	var preStop int64
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < preStop+sluicedShutdownBound+5 {
		t.Errorf("%s: terminationGracePeriodSeconds %v does not cover the preStop pause (%d s) and sluiced's shutdown (%d s)", sts.Name, g, preStop, sluicedShutdownBound)
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.FSGroup == nil {
		t.Errorf("%s: pod security context %+v is not non-root with an fsGroup", sts.Name, psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container security context %+v: want a read-only root filesystem and no privilege escalation", sts.Name, sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no cpu and memory requests", sts.Name)
	}
	if len(spec.TopologySpreadConstraints) == 0 && (spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil) {
		t.Errorf("%s: neither topology spread nor pod anti-affinity", sts.Name)
	}
	ref := false
	for _, from := range c.EnvFrom {
		ref = ref || (from.ConfigMapRef != nil && m.configMap(from.ConfigMapRef.Name) != nil)
	}
	if !ref {
		t.Errorf("%s: the pods do not read the overlay's ConfigMap", sts.Name)
	}
}

// nodeIDOf is the node id sluiced derives for p (--node-id-from-name).
func nodeIDOf(t *testing.T, p pod) int32 {
	t.Helper()
	from, ok := p.setting("node-id-from-name")
	if !ok || from != p.Name {
		t.Fatalf("%s: --node-id-from-name %q, want the pod name", p.Name, from)
	}
	offset := 1 // sluiced's default
	if v, ok := p.setting("node-id-offset"); ok {
		var err error
		if offset, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s: node id offset %q: %v", p.Name, v, err)
		}
	}
	id, err := node.NodeIDFromName(from, offset)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The quorum and the gossip seeds name the pods by their stable DNS names
// (<statefulset>-<ordinal>.<headless service>): the voters are exactly the
// pods with the controller role, each with its node id and Raft port; the
// seeds are pods' gossip ports; every pod advertises its own name for
// both gRPC listeners and the Kafka listener.
func TestManifestVotersAndSeedsNameThePods(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			type podRef struct {
				p     pod
				id    int32
				ctl   bool
				raft  int32
				gosip int32
			}
			byHost := map[string]podRef{}
			var ctlPods []string
			var all []pod
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				for ord := range int(*sts.Spec.Replicas) {
					p := podOf(t, m, sts, ord, "sluice-ns", "10.0.0.1")
					roles, _ := p.setting("roles")
					ref := podRef{p: p, id: nodeIDOf(t, p), ctl: strings.Contains(roles, node.RoleController),
						raft: listenPort(t, p, "raft-listen"), gosip: listenPort(t, p, "gossip-listen")}
					byHost[p.Name+"."+sts.Spec.ServiceName] = ref
					if ref.ctl {
						ctlPods = append(ctlPods, p.Name)
					}
					all = append(all, p)
					adv, _ := p.setting("advertise")
					if want := fmt.Sprintf("%s.%s.sluice-ns.svc:%d", p.Name, sts.Spec.ServiceName, listenPort(t, p, "listen")); adv != want {
						t.Errorf("%s advertises %q, want %q", p.Name, adv, want)
					}
					iadv, _ := p.setting("internal-advertise")
					if want := fmt.Sprintf("%s.%s.sluice-ns.svc:%d", p.Name, sts.Spec.ServiceName, listenPort(t, p, "internal-listen")); iadv != want {
						t.Errorf("%s advertises its internal listener as %q, want %q", p.Name, iadv, want)
					}
					kadv, _ := p.setting("kafka-advertise")
					if want := fmt.Sprintf("%s.%s.sluice-ns.svc:%d", p.Name, sts.Spec.ServiceName, listenPort(t, p, "kafka-listen")); kadv != want {
						t.Errorf("%s advertises its Kafka listener as %q, want %q", p.Name, kadv, want)
					}
				}
			}
			for _, p := range all {
				v, _ := p.setting("controller-voters")
				voters, err := node.ParseVoters(v)
				if err != nil || len(voters) == 0 {
					t.Fatalf("%s: controller voters %q: %v", p.Name, v, err)
				}
				seen := map[string]bool{}
				for _, vo := range voters {
					host, port, _ := net.SplitHostPort(vo.Address)
					ref, ok := byHost[host]
					switch {
					case !ok:
						t.Errorf("%s: voter %d@%s is no pod's stable name", p.Name, vo.ID, vo.Address)
					case !ref.ctl || ref.id != vo.ID || port != strconv.Itoa(int(ref.raft)):
						t.Errorf("%s: voter %d@%s, but that pod is node %d (controller %v) with Raft port %d", p.Name, vo.ID, vo.Address, ref.id, ref.ctl, ref.raft)
					}
					seen[ref.p.Name] = true
				}
				for _, c := range ctlPods {
					if !seen[c] {
						t.Errorf("%s: controller pod %s is not in the voters %q", p.Name, c, v)
					}
				}
				join, _ := p.setting("join")
				if len(node.ParseList(join)) == 0 {
					t.Errorf("%s: no gossip seeds", p.Name)
				}
				for _, seed := range node.ParseList(join) {
					host, port, _ := net.SplitHostPort(seed)
					if ref, ok := byHost[host]; !ok || port != strconv.Itoa(int(ref.gosip)) {
						t.Errorf("%s: seed %s is not a pod's stable name and gossip port", p.Name, seed)
					}
				}
			}
		})
	}
}

// A change of the ConfigMap changes the StatefulSets' pod template (the
// generated name carries a hash of the content), so applying it rolls the
// pods.
func TestConfigChangeRollsThePods(t *testing.T) {
	fSys := copyToMemory(t, "kubernetes")
	before, err := render(fSys, "/kubernetes/overlays/combined")
	if err != nil {
		t.Fatal(err)
	}
	path := "/kubernetes/base/kustomization.yaml"
	b, err := fSys.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), "SLUICE_LOG_LEVEL=info", "SLUICE_LOG_LEVEL=debug", 1)
	if changed == string(b) {
		t.Fatal("SLUICE_LOG_LEVEL=info not found in the base kustomization")
	}
	if err := fSys.WriteFile(path, []byte(changed)); err != nil {
		t.Fatal(err)
	}
	after, err := render(fSys, "/kubernetes/overlays/combined")
	if err != nil {
		t.Fatal(err)
	}
	if equality.Semantic.DeepEqual(before.StatefulSets[0].Spec.Template, after.StatefulSets[0].Spec.Template) {
		t.Fatal("the pod template is the same after a ConfigMap change: the pods would not roll")
	}
}

// The NetworkPolicy (base/networkpolicy.yaml): one per overlay, in the
// pods' namespace, selecting every sluice pod and nothing else; the
// internal gRPC, Raft and gossip (TCP and UDP) ports admit only sluice
// pods of the namespace (in the split overlay: controllers and brokers
// alike, so they reach each other), the client gRPC, Kafka and HTTP ports
// anyone (applications, probes, Prometheus).
func TestManifestNetworkPolicy(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			if len(m.NetworkPolicies) != 1 {
				t.Fatalf("%d NetworkPolicies, want 1", len(m.NetworkPolicies))
			}
			np := &m.NetworkPolicies[0]
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				t.Errorf("NetworkPolicy %s: policyTypes %v lack Ingress", np.Name, np.Spec.PolicyTypes)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			checkSluiceOnly(t, m, "NetworkPolicy "+np.Name+": podSelector", sel)
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				if np.Namespace != sts.Namespace {
					t.Errorf("NetworkPolicy %s is in namespace %q, StatefulSet %s in %q", np.Name, np.Namespace, sts.Name, sts.Namespace)
				}
				p := podOf(t, m, sts, 0, "default", "10.0.0.1")
				c := sts.Spec.Template.Spec.Containers[0]
				for _, port := range []struct {
					what   string
					port   int32
					proto  corev1.Protocol
					anyone bool
				}{
					{"client gRPC", listenPort(t, p, "listen"), corev1.ProtocolTCP, true},
					{"Kafka", listenPort(t, p, "kafka-listen"), corev1.ProtocolTCP, true},
					{"HTTP", listenPort(t, p, "http-listen"), corev1.ProtocolTCP, true},
					{"internal gRPC", listenPort(t, p, "internal-listen"), corev1.ProtocolTCP, false},
					{"Raft", listenPort(t, p, "raft-listen"), corev1.ProtocolTCP, false},
					{"gossip", listenPort(t, p, "gossip-listen"), corev1.ProtocolTCP, false},
					{"gossip", listenPort(t, p, "gossip-listen"), corev1.ProtocolUDP, false},
				} {
					what := fmt.Sprintf("%s: the %s port %d/%s", sts.Name, port.what, port.port, port.proto)
					var rules []networkingv1.NetworkPolicyIngressRule
					for _, r := range np.Spec.Ingress {
						if ruleAdmitsPort(c, r, port.port, port.proto) {
							rules = append(rules, r)
						}
					}
					if len(rules) == 0 {
						t.Errorf("%s: no ingress rule admits it", what)
						continue
					}
					open := false
					for _, r := range rules {
						if len(r.From) == 0 {
							open = true
							continue
						}
						for _, peer := range r.From {
							if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
								t.Errorf("%s: admitted from %+v, not pods of the namespace", what, peer)
								continue
							}
							ps, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
							if err != nil {
								t.Fatal(err)
							}
							if !port.anyone {
								checkSluiceOnly(t, m, what+": admitted from", ps)
							}
						}
					}
					switch {
					case port.anyone && !open:
						t.Errorf("%s: not admitted from any source (clients, probes, Prometheus)", what)
					case !port.anyone && open:
						t.Errorf("%s: admitted from any source; want sluice pods only", what)
					}
				}
			}
		})
	}
}

// checkSluiceOnly checks that sel selects every sluice pod of m (every
// StatefulSet's pod template) and no other: not a pod with a template's
// labels less app.kubernetes.io/name, nor an unlabelled one.
func checkSluiceOnly(t *testing.T, m *manifests, what string, sel labels.Selector) {
	t.Helper()
	if sel.Matches(labels.Set{}) {
		t.Errorf("%s %q selects every pod of the namespace", what, sel)
	}
	for i := range m.StatefulSets {
		sts := &m.StatefulSets[i]
		l := labels.Set(sts.Spec.Template.Labels)
		if !sel.Matches(l) {
			t.Errorf("%s %q does not select the pods of %s (labels %v)", what, sel, sts.Name, l)
		}
		other := labels.Set{}
		for k, v := range l {
			if k != "app.kubernetes.io/name" {
				other[k] = v
			}
		}
		if sel.Matches(other) {
			t.Errorf("%s %q selects pods that are not sluice's (labels %v)", what, sel, other)
		}
	}
}

// ruleAdmitsPort reports whether an ingress rule's ports include port
// (of protocol proto) of container c: a rule with no ports admits all.
func ruleAdmitsPort(c corev1.Container, r networkingv1.NetworkPolicyIngressRule, port int32, proto corev1.Protocol) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type == intstr.String {
			for _, cp := range c.Ports {
				if cp.Name == p.Port.StrVal && cp.ContainerPort == port && protocol(cp.Protocol) == proto {
					return true
				}
			}
			continue
		}
		lo, hi := p.Port.IntVal, p.Port.IntVal
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		if lo <= port && port <= hi {
			return true
		}
	}
	return false
}

// No overlay turns /debug/pprof on (decision 61: a CPU profile is for
// operators, not whoever reaches the HTTP port): no --pprof argument, no
// SLUICE_PPROF but false.
func TestManifestsLeavePprofOff(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				for _, a := range sts.Spec.Template.Spec.Containers[0].Args {
					if f, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); f == "pprof" {
						t.Errorf("%s: argument %q turns /debug/pprof on", sts.Name, a)
					}
				}
				p := podOf(t, m, sts, 0, "default", "10.0.0.1")
				if v, ok := p.setting("pprof"); ok {
					if on, err := strconv.ParseBool(v); err != nil || on {
						t.Errorf("%s: pprof is %q (an argument or SLUICE_PPROF)", sts.Name, v)
					}
				}
			}
		})
	}
}

// copyToMemory copies the directory dir (relative to this package) into an
// in-memory file system, under /dir.
func copyToMemory(t testing.TB, dir string) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile("/"+filepath.ToSlash(path), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}
