package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/sluice-io/sluice/internal/proccluster"
)

// The binaries, built once per test binary by the first test that needs
// them; TestMain removes them. The manifests use the flags of the
// binaries that ship (bins); the rehearsal runs them on one machine with
// the testing flag --hosts (testBins: built with the sluicetest tag).
var (
	bins     = proccluster.NewShippedBuildCache("sluice-deploy-bin-")
	testBins = proccluster.NewBuildCache("sluice-deploy-testbin-")
)

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	testBins.Remove()
	os.Exit(code)
}

// binaries returns sluiced and sluice as they ship, built from this
// module on the first call of the test binary.
func binaries(tb testing.TB) proccluster.Binaries { return bins.Get(tb) }

var (
	flagsOnce sync.Once
	flagSet   map[string]bool
	flagsErr  error
)

// helpFlag matches a flag line of sluiced --help (flag.PrintDefaults).
var helpFlag = regexp.MustCompile(`^  -([a-z0-9-]+)`)

// sluicedFlags returns the flag names that sluiced --help lists: the
// binary's real flag set, not a copy of it.
func sluicedFlags(tb testing.TB) map[string]bool {
	tb.Helper()
	b := binaries(tb)
	flagsOnce.Do(func() {
		cmd := exec.Command(b.Sluiced, "--help")
		cmd.Env = proccluster.Env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			flagsErr = fmt.Errorf("sluiced --help: %w\n%s", err, out)
			return
		}
		flagSet = map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
				flagSet[m[1]] = true
			}
		}
		if len(flagSet) < 10 || !flagSet["data-dir"] {
			flagsErr = fmt.Errorf("sluiced --help lists too few flags (%d):\n%s", len(flagSet), out)
		}
	})
	if flagsErr != nil {
		tb.Fatal(flagsErr)
	}
	return flagSet
}

// flagOfEnv returns the flag that SLUICE_<NAME> sets (sluiced's envName
// the other way round), or "" for a variable that is not SLUICE_*.
func flagOfEnv(name string) string {
	rest, ok := strings.CutPrefix(name, "SLUICE_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
}

// overlays are the kustomize overlays, by name, under kubernetes/overlays
// (and extraOverlays).
var overlays = []string{"combined", "split", "tls", "split-tls", "tls-kafka"}

// manifests is one rendered overlay, decoded strictly into the API types
// (cert-manager's into the types of certmanager_test.go).
type manifests struct {
	Services        []corev1.Service
	StatefulSets    []appsv1.StatefulSet
	PDBs            []policyv1.PodDisruptionBudget
	ConfigMaps      []corev1.ConfigMap
	NetworkPolicies []networkingv1.NetworkPolicy
	Certificates    []certificate
	Issuers         []issuer
	Jobs            []batchv1.Job
}

// render runs kustomize's build of dir on fSys (the krusty library, what
// `kubectl apply -k` runs) and decodes every object strictly: a field the
// API types do not have fails, as does a kind this test does not know.
func render(fSys filesys.FileSystem, dir string) (*manifests, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(fSys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	m := &manifests{}
	for _, res := range rm.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		var into any
		switch kind := res.GetKind(); {
		case res.GetApiVersion() == certManagerV1 && kind == "Certificate":
			m.Certificates = append(m.Certificates, certificate{})
			into = &m.Certificates[len(m.Certificates)-1]
		case res.GetApiVersion() == certManagerV1 && kind == "Issuer":
			m.Issuers = append(m.Issuers, issuer{})
			into = &m.Issuers[len(m.Issuers)-1]
		case res.GetApiVersion() == "networking.k8s.io/v1" && kind == "NetworkPolicy":
			m.NetworkPolicies = append(m.NetworkPolicies, networkingv1.NetworkPolicy{})
			into = &m.NetworkPolicies[len(m.NetworkPolicies)-1]
		case kind == "Service":
			m.Services = append(m.Services, corev1.Service{})
			into = &m.Services[len(m.Services)-1]
		case kind == "StatefulSet":
			m.StatefulSets = append(m.StatefulSets, appsv1.StatefulSet{})
			into = &m.StatefulSets[len(m.StatefulSets)-1]
		case kind == "PodDisruptionBudget":
			m.PDBs = append(m.PDBs, policyv1.PodDisruptionBudget{})
			into = &m.PDBs[len(m.PDBs)-1]
		case res.GetApiVersion() == "batch/v1" && kind == "Job":
			m.Jobs = append(m.Jobs, batchv1.Job{})
			into = &m.Jobs[len(m.Jobs)-1]
		case kind == "ConfigMap":
			m.ConfigMaps = append(m.ConfigMaps, corev1.ConfigMap{})
			into = &m.ConfigMaps[len(m.ConfigMaps)-1]
		default:
			return nil, fmt.Errorf("%s: %s %s (%s) is a kind this test does not check", dir, kind, res.GetName(), res.GetApiVersion())
		}
		if err := yaml.UnmarshalStrict(y, into); err != nil {
			return nil, fmt.Errorf("%s: %s %s does not decode strictly: %w\n%s", dir, res.GetKind(), res.GetName(), err, y)
		}
	}
	return m, nil
}

// extraOverlays are overlays the tests render that the repository does
// not ship, by name: their kustomization.yaml, as if it were in
// kubernetes/overlays/<name>. They are the overlays docs/kubernetes.md
// ("TLS") tells users to write: split-tls for the split overlay with TLS,
// tls-kafka for the tls overlay in another namespace.
var extraOverlays = map[string]string{
	"split-tls": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: sluice
resources:
  - ../split
components:
  - ../../components/tls
`,
	"tls-kafka": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kafka
resources:
  - ../tls
patches:
  - target:
      kind: Certificate
      name: sluice-node
    patch: |-
      - op: replace
        path: /spec/dnsNames
        value:
          - "*.sluice-headless.kafka.svc"
          - "*.sluice-headless.kafka.svc.cluster.local"
          - sluice
          - sluice.kafka
          - sluice.kafka.svc
          - sluice.kafka.svc.cluster.local
          - localhost
`,
}

// renderOverlay renders kubernetes/overlays/name from disk, or the
// extra overlay name in memory.
func renderOverlay(tb testing.TB, name string) *manifests {
	tb.Helper()
	if k, ok := extraOverlays[name]; ok {
		fSys := copyToMemory(tb, "kubernetes")
		if err := fSys.WriteFile("/kubernetes/overlays/"+name+"/kustomization.yaml", []byte(k)); err != nil {
			tb.Fatal(err)
		}
		m, err := render(fSys, "/kubernetes/overlays/"+name)
		if err != nil {
			tb.Fatal(err)
		}
		return m
	}
	m, err := render(filesys.MakeFsOnDisk(), filepath.Join("kubernetes", "overlays", name))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// namespaceOf is the namespace sts's pods run in: its own, or "default"
// for an overlay that names none (kubectl's namespace, "default" here).
func namespaceOf(sts *appsv1.StatefulSet) string {
	if sts.Namespace == "" {
		return "default"
	}
	return sts.Namespace
}

func (m *manifests) service(name string) *corev1.Service {
	for i := range m.Services {
		if m.Services[i].Name == name {
			return &m.Services[i]
		}
	}
	return nil
}

func (m *manifests) configMap(name string) *corev1.ConfigMap {
	for i := range m.ConfigMaps {
		if m.ConfigMaps[i].Name == name {
			return &m.ConfigMaps[i]
		}
	}
	return nil
}

// pod is one pod of a StatefulSet as the kubelet would start it: the
// downward-API values of ordinal substituted.
type pod struct {
	Name      string
	Namespace string
	IP        string
	Command   []string
	Args      []string // $(VAR) expanded
	Env       []string // KEY=VALUE, envFrom first, then env (which wins)
	// Ports maps the manifests' container ports to the ports this pod
	// really uses (the rehearsal's free ports); nil: as in the manifests.
	Ports map[int]int
}

// podOf returns the pod of sts with ordinal, in namespace, at ip, whose
// only container runs sluiced. ConfigMaps named by envFrom come from m.
func podOf(tb testing.TB, m *manifests, sts *appsv1.StatefulSet, ordinal int, namespace, ip string) pod {
	tb.Helper()
	if n := len(sts.Spec.Template.Spec.Containers); n != 1 {
		tb.Fatalf("StatefulSet %s has %d containers, want 1", sts.Name, n)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	p := pod{Name: fmt.Sprintf("%s-%d", sts.Name, ordinal), Namespace: namespace, IP: ip, Command: c.Command}
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			tb.Fatalf("%s: envFrom other than a ConfigMap", sts.Name)
		}
		cm := m.configMap(from.ConfigMapRef.Name)
		if cm == nil {
			tb.Fatalf("%s: envFrom names ConfigMap %s, which the overlay does not have", sts.Name, from.ConfigMapRef.Name)
		}
		for _, k := range sortedKeys(cm.Data) {
			set(k, cm.Data[k])
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			switch path := e.ValueFrom.FieldRef.FieldPath; path {
			case "metadata.name":
				set(e.Name, p.Name)
			case "metadata.namespace":
				set(e.Name, namespace)
			case "status.podIP":
				set(e.Name, ip)
			default:
				tb.Fatalf("%s: env %s from field %s, which this test does not substitute", sts.Name, e.Name, path)
			}
		default:
			tb.Fatalf("%s: env %s from a source this test does not substitute", sts.Name, e.Name)
		}
	}
	for _, k := range order {
		p.Env = append(p.Env, k+"="+vars[k])
	}
	for _, a := range c.Args {
		p.Args = append(p.Args, expand(a, vars))
	}
	return p
}

// varRef is a Kubernetes variable reference in args and env values.
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand substitutes $(VAR) with vars as the kubelet does: an undefined
// reference stays as written, $$ is a literal $.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		if v, ok := vars[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// flagValue returns the value of --name=value (or --name value) in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = "--" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// setting returns the value a pod gives sluiced's flag name: its argument,
// else its SLUICE_* environment variable.
func (p pod) setting(name string) (string, bool) {
	if v, ok := flagValue(p.Args, name); ok {
		return v, true
	}
	env := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	for _, kv := range slices.Backward(p.Env) {
		if k, v, _ := strings.Cut(kv, "="); k == env {
			return v, true
		}
	}
	return "", false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
