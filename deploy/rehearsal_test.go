//go:build sluicetest

package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
)

// The StatefulSet rehearsal runs the combined overlay's pods (and the tls
// overlay's: rehearsal_tls_test.go) as real sluiced processes on one
// machine. What a pod would have and this test
// stands in for:
//
//   - its IP: 127.0.0.11, .12, .13 for ordinals 0, 1, 2 (Linux routes all
//     of 127/8 to lo), every pod on the same ports — free ones picked for
//     the run in place of the manifests' 9400-9404 and 9092 (freeRehearsalPorts);
//   - its network namespace: the pods share the machine's, so a listen
//     address on 0.0.0.0 binds the pod's IP instead;
//   - the cluster's DNS: sluiced --hosts (and the same table in this test
//     process, for the client) resolves the pods' names under the headless
//     Service to their IPs (and the client Service's name to pod 0's);
//   - its volume (the PersistentVolumeClaim): a directory per pod, kept
//     across deletions, in place of the --data-dir mount path;
//   - its Secret volumes and cert-manager, which writes them: certManager
//     (rehearsal_tls_test.go);
//   - its namespace: the overlay's, or "default";
//   - the image: the sluiced built from this module in place of the
//     command's /usr/local/bin/sluiced.
//
// Everything else (the arguments, the environment from the ConfigMap and
// the downward API, the probes, the preStop pause, the grace period,
// minReadySeconds) is taken from the rendered manifests.

// rehearsalIP is the IP of the pod with ordinal.
func rehearsalIP(ordinal int) string { return fmt.Sprintf("127.0.0.%d", 11+ordinal) }

// podProcess is a pod's sluiced process.
type podProcess struct {
	pod     pod
	args    []string
	logPath string

	mu     sync.Mutex // guards the following
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// start runs the pod's container (again), its output appended to its log.
func (pp *podProcess) start(sluiced string) error {
	logf, err := os.OpenFile(pp.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== rehearsal: %s start of pod %s\n", time.Now().Format(time.RFC3339Nano), pp.pod.Name)
	cmd := exec.Command(sluiced, pp.args...)
	cmd.Env = proccluster.Env(pp.pod.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	pp.mu.Lock()
	pp.cmd, pp.exited = cmd, exited
	pp.mu.Unlock()
	return nil
}

// running reports whether the process runs; exitedCh is closed once it
// has exited.
func (pp *podProcess) process() (*exec.Cmd, chan struct{}) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.cmd, pp.exited
}

// kill SIGKILLs the process if it runs and waits for it.
func (pp *podProcess) kill() {
	cmd, exited := pp.process()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// delete deletes the pod as the kubelet would: the preStop pause, SIGTERM,
// then SIGKILL if it still runs at the end of the grace period. It returns
// how long the process took to exit after SIGTERM and whether it had to
// be killed.
func (pp *podProcess) delete(preStop, grace time.Duration) (time.Duration, bool) {
	cmd, exited := pp.process()
	time.Sleep(preStop) // the preStop sleep action itself, not a wait for a condition
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return time.Since(start), false
	case <-time.After(grace - preStop):
		_ = cmd.Process.Kill()
		<-exited
		return time.Since(start), true
	}
}

// tail returns the end of the pod's log.
func (pp *podProcess) tail() string {
	b, _ := os.ReadFile(pp.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// rehearsalHosts is the cluster DNS of sts's pods as the rehearsal
// stands it in (name=ip): each pod's name under the headless Service,
// short and in the namespace, and the names of each client Service that
// selects sts's pods (a Service's virtual IP: ordinal 0's here) — in the
// namespace, and short, as a pod of the namespace (the ACL bootstrap
// Job's) reaches it through its DNS search path.
func rehearsalHosts(m *manifests, sts *appsv1.StatefulSet) []string {
	ns := namespaceOf(sts)
	var hosts []string
	for ord := range int(*sts.Spec.Replicas) {
		short := fmt.Sprintf("%s-%d.%s", sts.Name, ord, sts.Spec.ServiceName)
		hosts = append(hosts, short+"="+rehearsalIP(ord), short+"."+ns+".svc="+rehearsalIP(ord))
	}
	for _, svc := range m.Services {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
			hosts = append(hosts, svc.Name+"="+rehearsalIP(0), svc.Name+"."+ns+".svc="+rehearsalIP(0))
		}
	}
	return hosts
}

// rehearsalPods builds the pods of sts: the rendered pod spec with the
// substitutions listed above. mounts maps the mount path of each volume
// other than the data volume to the directory that stands in for it
// (the Secrets: certManager.mounts); a path under it in an argument is
// rewritten to the directory.
func rehearsalPods(t *testing.T, m *manifests, sts *appsv1.StatefulSet, dir string, ports map[int]int, mounts map[string]string) []*podProcess {
	t.Helper()
	replicas := int(*sts.Spec.Replicas)
	hosts := rehearsalHosts(m, sts)
	for _, vm := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
		isClaim := false
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			isClaim = isClaim || vct.Name == vm.Name
		}
		if _, ok := mounts[vm.MountPath]; !ok && !isClaim {
			t.Fatalf("%s: volume %s at %s has no stand-in in the rehearsal", sts.Name, vm.Name, vm.MountPath)
		}
	}
	var out []*podProcess
	for ord := range replicas {
		p := podOf(t, m, sts, ord, namespaceOf(sts), rehearsalIP(ord))
		p.Args, p.Env = remapPorts(p.Args, ports), remapPorts(p.Env, ports)
		p.Ports = ports
		dataDir, _ := p.setting("data-dir")
		var args []string
		for _, a := range p.Args {
			name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			switch {
			case name == "data-dir":
				value = filepath.Join(dir, "volumes", p.Name) // the PVC
			case strings.HasSuffix(name, "listen") && strings.HasPrefix(value, "0.0.0.0:"):
				value = p.IP + strings.TrimPrefix(value, "0.0.0.0")
			}
			for mountPath, standIn := range mounts {
				if rest, ok := strings.CutPrefix(value, mountPath+"/"); ok {
					value = filepath.Join(standIn, rest)
				}
			}
			args = append(args, "--"+name+"="+value)
		}
		if dataDir == "" {
			t.Fatalf("%s: no data dir", p.Name)
		}
		args = append(args, "--hosts="+strings.Join(hosts, ","))
		out = append(out, &podProcess{pod: p, args: args, logPath: filepath.Join(dir, p.Name+".log")})
	}
	return out
}

// rehearsedOverlays are the overlays the rehearsals run.
var rehearsedOverlays = []string{"combined", "tls"}

var (
	hostsOnce sync.Once
	hostsErr  error
)

// installRehearsalHosts makes the names of every rehearsed overlay's
// pods and client Services resolve in this process as in the pods'
// sluiced (--hosts): the client meets them. node.Hosts.Install changes
// the whole process, so it is installed once, with all the names.
func installRehearsalHosts(t *testing.T) {
	t.Helper()
	hostsOnce.Do(func() {
		all := node.Hosts{}
		for _, name := range rehearsedOverlays {
			m, err := render(filesys.MakeFsOnDisk(), filepath.Join("kubernetes", "overlays", name))
			if err != nil {
				hostsErr = err
				return
			}
			for i := range m.StatefulSets {
				h, err := node.ParseHosts(strings.Join(rehearsalHosts(m, &m.StatefulSets[i]), ","))
				if err != nil {
					hostsErr = err
					return
				}
				for n, ip := range h {
					if have, ok := all[n]; ok && have != ip {
						hostsErr = fmt.Errorf("%s is %v in one rehearsal and %v in another", n, have, ip)
						return
					}
					all[n] = ip
				}
			}
		}
		all.Install()
	})
	if hostsErr != nil {
		t.Fatal(hostsErr)
	}
}

// freeRehearsalPorts maps each container port of the manifests to a port
// free on all three rehearsal IPs, TCP and UDP (gossip uses both), so
// the rehearsal never takes the ports a user's sluiced holds (9400-9404,
// 9092)
// nor another run's. Pods all use the same port numbers, as in the
// manifests.
func freeRehearsalPorts(t *testing.T, cports []corev1.ContainerPort) map[int]int {
	t.Helper()
	out := map[int]int{}
	used := map[int]bool{}
	for _, cp := range cports {
		want := int(cp.ContainerPort)
		if _, done := out[want]; done {
			continue
		}
	attempts:
		for range 50 {
			l, err := net.Listen("tcp", rehearsalIP(0)+":0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			if used[port] {
				continue
			}
			for ord := range 3 {
				addr := net.JoinHostPort(rehearsalIP(ord), fmt.Sprint(port))
				tl, err := net.Listen("tcp", addr)
				if err != nil {
					continue attempts
				}
				ul, err := net.ListenPacket("udp", addr)
				tl.Close()
				if err != nil {
					continue attempts
				}
				ul.Close()
			}
			out[want], used[port] = port, true
			break
		}
		if _, ok := out[want]; !ok {
			t.Fatalf("no free port for container port %d on the rehearsal IPs", want)
		}
	}
	return out
}

var portRE = regexp.MustCompile(`:(\d+)\b`)

// remapPorts rewrites every ":PORT" of a mapped port in values.
func remapPorts(values []string, ports map[int]int) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = portRE.ReplaceAllStringFunc(v, func(m string) string {
			n, err := strconv.Atoi(m[1:])
			if mapped, ok := ports[n]; err == nil && ok {
				return ":" + strconv.Itoa(mapped)
			}
			return m
		})
	}
	return out
}

// healthStatus asks addr's gRPC health service for service, as the
// kubelet's gRPC probe does, within timeout.
func healthStatus(addr, service string, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// probe runs a probe of the container spec (gRPC or HTTP GET) against
// pod p once, as the kubelet does.
func probe(p pod, pr *corev1.Probe) error {
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	mapped := func(port int) string {
		if m, ok := p.Ports[port]; ok {
			port = m
		}
		return net.JoinHostPort(p.IP, fmt.Sprint(port))
	}
	switch {
	case pr.GRPC != nil:
		svc := ""
		if pr.GRPC.Service != nil {
			svc = *pr.GRPC.Service
		}
		st, err := healthStatus(mapped(int(pr.GRPC.Port)), svc, timeout)
		if err != nil {
			return err
		}
		if st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s: health of %q is %v", p.Name, svc, st)
		}
		return nil
	case pr.HTTPGet != nil:
		if pr.HTTPGet.Port.Type != intstr.Int {
			return fmt.Errorf("%s: HTTP probe port %s: the rehearsal takes numbers only", p.Name, pr.HTTPGet.Port.String())
		}
		return httpProbe(pr.HTTPGet.Scheme, mapped(pr.HTTPGet.Port.IntValue()), pr.HTTPGet.Path, timeout)
	}
	return fmt.Errorf("%s: a probe the rehearsal does not run", p.Name)
}

// httpProbe GETs path at addr as the kubelet's HTTP probe does: any
// status from 200 to 399 passes; over HTTPS the certificate is not
// verified.
func httpProbe(scheme corev1.URIScheme, addr, path string, timeout time.Duration) error {
	u := "http://" + addr + path
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if scheme == corev1.URISchemeHTTPS {
		u = "https://" + addr + path
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // as the kubelet
	}
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// TestStatefulSetRehearsal starts the combined overlay's three pods, lets
// them form a cluster, and rolls them as a StatefulSet update does
// (highest ordinal first; each pod deleted with its preStop pause and
// grace period, recreated on its volume, and the next one only once the
// new one has passed its startup and readiness probes and stayed ready
// for minReadySeconds) while an acks=all producer sends to a topic of
// replication factor 3 and min.insync.replicas=2 throughout. The producer
// must see no error, and every record must be read back once.
func TestStatefulSetRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three sluiced processes and rolls them (about a minute)")
	}
	rehearseRollingUpdate(t, "combined", rehearsalHooks{})
}

// rehearsalHooks are what a variant of the rehearsal adds to it.
type rehearsalHooks struct {
	// clientOptions returns the options of the test's clients (TLS).
	clientOptions func(*rehearsalRun) []client.Option
	// ready runs once every pod is ready, before the roll.
	ready func(*rehearsalRun)
	// available runs after the pod of ordinal ord is recreated and
	// available, before the next one is deleted.
	available func(run *rehearsalRun, ord int)
	// rolled runs after the roll, once the cluster is checked.
	rolled func(*rehearsalRun)
}

// rehearsalRun is one run of rehearseRollingUpdate, for its hooks.
type rehearsalRun struct {
	m    *manifests
	sts  *appsv1.StatefulSet
	pods []*podProcess
	// cm issues the Certificates of an overlay that has some (nil
	// otherwise), and writes their Secrets.
	cm *certManager
}

// rehearseRollingUpdate runs the rehearsal of TestStatefulSetRehearsal on
// overlay (one StatefulSet), with the hooks of a variant. The Secrets of
// an overlay's cert-manager Certificates are issued and written by a
// certManager (rehearsal_tls_test.go) standing in for cert-manager and
// the kubelet.
func rehearseRollingUpdate(t *testing.T, overlay string, hooks rehearsalHooks) {
	for ord := range 3 {
		l, err := net.Listen("tcp", rehearsalIP(ord)+":0")
		if err != nil {
			t.Fatalf("loopback address %s is not usable here: %v", rehearsalIP(ord), err)
		}
		l.Close()
	}
	b := testBins.Get(t) // --hosts: a testing flag
	m := renderOverlay(t, overlay)
	if len(m.StatefulSets) != 1 {
		t.Fatalf("%s overlay: %d StatefulSets, want 1", overlay, len(m.StatefulSets))
	}
	sts := &m.StatefulSets[0]
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	minReady := time.Duration(sts.Spec.MinReadySeconds) * time.Second
	startupBudget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second

	dir := t.TempDir()
	var cm *certManager
	var mounts map[string]string
	if len(m.Certificates) > 0 {
		cm = newCertManager(t, m, filepath.Join(dir, "secrets"))
		mounts = cm.mounts(t, sts)
	}
	pods := rehearsalPods(t, m, sts, dir, freeRehearsalPorts(t, c.Ports), mounts)
	run := &rehearsalRun{m: m, sts: sts, pods: pods, cm: cm}
	t.Cleanup(func() {
		for _, pp := range pods {
			pp.kill()
		}
		if t.Failed() {
			for _, pp := range pods {
				t.Logf("log of %s:\n%s", pp.pod.Name, pp.tail())
			}
		}
	})
	// The names the client meets (the pods' advertised addresses) resolve
	// in this process as in sluiced.
	installRehearsalHosts(t)

	// Parallel pod management: every pod at once.
	for _, pp := range pods {
		if err := pp.start(b.Sluiced); err != nil {
			t.Fatal(err)
		}
	}
	waitProbes := func(pp *podProcess) {
		t.Helper()
		_, exited := pp.process()
		wait.For(t, startupBudget, pp.pod.Name+" passes its startup probe", func() error {
			select {
			case <-exited:
				t.Fatalf("%s exited:\n%s", pp.pod.Name, pp.tail())
			default:
			}
			return probe(pp.pod, c.StartupProbe)
		})
		wait.For(t, 60*time.Second, pp.pod.Name+" passes its readiness probe", func() error { return probe(pp.pod, c.ReadinessProbe) })
		if err := probe(pp.pod, c.LivenessProbe); err != nil {
			t.Fatalf("%s ready but not live: %v", pp.pod.Name, err)
		}
	}
	for _, pp := range pods {
		waitProbes(pp)
	}
	t.Logf("%d pods ready", len(pods))
	// Every pod's Kafka listener (issue 34) is open at the address it
	// advertises to Kafka clients.
	for _, pp := range pods {
		kadv, ok := pp.pod.setting("kafka-advertise")
		if !ok {
			t.Fatalf("%s: no --kafka-advertise", pp.pod.Name)
		}
		conn, err := net.DialTimeout("tcp", kadv, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: Kafka listener at its advertised %s: %v", pp.pod.Name, kadv, err)
		}
		conn.Close()
	}
	if hooks.ready != nil {
		hooks.ready(run)
	}
	var clientOpts []client.Option
	if hooks.clientOptions != nil {
		clientOpts = hooks.clientOptions(run)
	}

	// The client bootstraps from the pods' stable names, as from the
	// client Service.
	var bootstrap []string
	for _, pp := range pods {
		adv, _ := pp.pod.setting("advertise")
		bootstrap = append(bootstrap, adv)
	}
	cl, err := client.New(bootstrap, append([]client.Option{client.WithRequestTimeout(5 * time.Second)}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wantBrokers := map[int32]string{}
	for _, pp := range pods {
		adv, _ := pp.pod.setting("advertise")
		wantBrokers[nodeIDOf(t, pp.pod)] = adv
	}
	checkCluster(t, cl, wantBrokers, "the cluster formed")
	const topic, partitions = "rehearsal", 3
	wait.For(t, 30*time.Second, "create topic "+topic, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := cl.CreateTopic(ctx, topic, partitions, 3, map[string]string{"min.insync.replicas": "2"})
		if err != nil && strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			return nil
		}
		return err
	})
	p, err := cl.NewProducer(client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// The producer sends about 1000 records a second until the roll is
	// over, for at most 5 minutes.
	var mu sync.Mutex // guards the following
	var sent, acked int
	var produceErrs []error
	stop := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		deadline := time.After(5 * time.Minute)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-deadline:
				return
			default:
			}
			mu.Lock()
			sent++
			mu.Unlock()
			p.Send(context.Background(), client.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(fmt.Sprintf("r-%07d", i))},
				func(_ client.RecordMetadata, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						produceErrs = append(produceErrs, err)
						return
					}
					acked++
				})
			if i%10 == 9 {
				time.Sleep(10 * time.Millisecond) // pacing
			}
		}
	}()
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return acked
	}
	wait.Until(t, 30*time.Second, "the producer's first acknowledgements", func() bool { return ackedNow() > 100 })

	// The rolling update: highest ordinal first.
	for ord := len(pods) - 1; ord >= 0; ord-- {
		pp := pods[ord]
		before := ackedNow()
		took, killed := pp.delete(preStop, grace)
		if killed {
			t.Errorf("%s still ran %v after SIGTERM (grace period %v): SIGKILLed", pp.pod.Name, took, grace)
		}
		t.Logf("%s deleted: exited %v after SIGTERM", pp.pod.Name, took.Round(time.Millisecond))
		if err := pp.start(b.Sluiced); err != nil {
			t.Fatal(err)
		}
		waitProbes(pp)
		// minReadySeconds: the controller counts the pod available only
		// after it has stayed ready this long, then rolls the next one.
		// The readiness probe is run throughout, as the kubelet does.
		_, exited := pp.process()
		readySince := time.Now()
		t.Logf("%s ready; checking it stays ready for minReadySeconds (%v)", pp.pod.Name, minReady)
		for time.Since(readySince) < minReady {
			if err := probe(pp.pod, c.ReadinessProbe); err != nil {
				t.Fatalf("%s stopped being ready %v after it became ready: %v", pp.pod.Name, time.Since(readySince).Round(time.Millisecond), err)
			}
			select {
			case <-exited:
				t.Fatalf("%s exited while becoming available:\n%s", pp.pod.Name, pp.tail())
			case <-time.After(min(500*time.Millisecond, minReady-time.Since(readySince)+time.Millisecond)):
			}
		}
		if err := probe(pp.pod, c.ReadinessProbe); err != nil {
			t.Fatalf("%s not ready %v after it became ready: %v", pp.pod.Name, minReady, err)
		}
		t.Logf("%s recreated and available; %d records acknowledged meanwhile", pp.pod.Name, ackedNow()-before)
		if hooks.available != nil {
			hooks.available(run, ord)
		}
	}
	// A little more traffic on the rolled cluster, then the producer stops.
	target := ackedNow() + 500
	wait.Until(t, 30*time.Second, "acknowledgements after the roll", func() bool { return ackedNow() > target })
	close(stop)
	<-producerDone
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer fcancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	total, errsSeen := sent, produceErrs
	mu.Unlock()
	t.Logf("%d records sent, producer stats %+v", total, p.Stats())
	if len(errsSeen) > 0 {
		t.Fatalf("%d of %d records failed; first: %v", len(errsSeen), total, errsSeen[0])
	}

	checkCluster(t, cl, wantBrokers, "the cluster after the roll")
	if hooks.rolled != nil {
		hooks.rolled(run)
	}

	// Every record, exactly once.
	got := readAll(t, cl, topic, partitions)
	seen := make(map[string]int, len(got))
	for _, v := range got {
		seen[v]++
	}
	var lost, dup []string
	for i := range total {
		v := fmt.Sprintf("r-%07d", i)
		switch seen[v] {
		case 0:
			lost = append(lost, v)
		case 1:
		default:
			dup = append(dup, v)
		}
	}
	if len(lost) > 0 || len(dup) > 0 || len(got) != total {
		t.Fatalf("%d records sent and acknowledged, %d read: %d lost (first %v), %d duplicated (first %v)",
			total, len(got), len(lost), first(lost), len(dup), first(dup))
	}
	t.Logf("all %d records read back once", total)
}

// checkCluster waits (up to 30 s) until the cluster reports a controller
// leader, three voters, exactly the brokers of want (node id -> address:
// the pods' advertised stable names) unfenced, and no under-replicated or
// offline partition.
func checkCluster(t *testing.T, cl *client.Client, want map[int32]string, what string) {
	t.Helper()
	wait.For(t, 30*time.Second, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := cl.DescribeCluster(ctx)
		if err != nil {
			return err
		}
		if st.GetControllerLeader() <= 0 || len(st.GetVoters()) != 3 {
			return fmt.Errorf("controller leader %d, %d voters", st.GetControllerLeader(), len(st.GetVoters()))
		}
		got := map[int32]string{}
		for _, b := range st.GetBrokers() {
			if b.GetFenced() {
				return fmt.Errorf("broker %d is fenced", b.GetNodeId())
			}
			got[b.GetNodeId()] = b.GetAddress()
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("brokers %v, want %v", got, want)
		}
		if u, o := st.GetUnderReplicatedPartitions(), st.GetOfflinePartitions(); u != 0 || o != 0 {
			return fmt.Errorf("%d under-replicated and %d offline partitions", u, o)
		}
		return nil
	})
}

func first(s []string) []string { return s[:min(len(s), 5)] }

// readAll reads every partition of topic from the start to its high
// watermark within 60 s and returns the values.
func readAll(t *testing.T, cl *client.Client, topic string, partitions int32) []string {
	t.Helper()
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	for part := range partitions {
		if err := co.Assign(topic, part, client.OffsetEarliest); err != nil {
			t.Fatal(err)
		}
	}
	done := func() bool {
		for part := range partitions {
			pos, ok := co.Position(topic, part)
			if hw := co.HighWatermark(topic, part); !ok || hw < 0 || pos < hw {
				return false
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []string
	var lastErr error
	for !done() {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		recs, err := co.Poll(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("reading %s: not at every high watermark within 60s (%d records; last error: %v)", topic, len(out), lastErr)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			lastErr = err
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	return out
}
