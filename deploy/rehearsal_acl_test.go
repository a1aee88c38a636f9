//go:build sluicetest

package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/internal/wait"
)

// The ACL bootstrap in the TLS rehearsal: the tls overlay's Job
// (overlays/tls/acl-bootstrap.yaml) run as Kubernetes would run it
// against the rehearsed pods — its commands and arguments taken from the
// rendered manifests, as the pods' are — then what it grants checked
// with its principals' client certificates.
//
// What the Job's pod would have and the rehearsal stands in for: its
// Secret volumes (certManager.clientSecret writes the Secret, the mount
// path in an argument is rewritten to it), the cluster's DNS (SLUICE_HOSTS
// in its environment: the CLI built with the sluicetest tag resolves
// these names as the pods' sluiced does), the Services' ports (a Service
// port is its target container port, which the rehearsal maps to a free
// one), the image (the sluice built from this module in place of
// /usr/local/bin/sluice), and the Job controller's retries
// (restartPolicy OnFailure: a failed container runs again).

// aclGrant is what one container of the bootstrap Job grants: `sluice acl
// create --allow-principal=P (--producer|--consumer) --topic=T
// [--group=G]`.
type aclGrant struct {
	container     string
	principal     string
	topic, group  string
	producer      bool
	consumer      bool
	certSecret    string // the Secret of the principal's client Certificate
	clientOptions []client.Option
}

// runACLBootstrapJob runs the one Job of run's overlay: its init
// containers one after the other, then its containers, each until it
// succeeds (within 60 s), and returns what each grants.
func runACLBootstrapJob(t *testing.T, run *rehearsalRun, sluice string) []aclGrant {
	t.Helper()
	if len(run.m.Jobs) != 1 {
		t.Fatalf("%d Jobs in the overlay, want the ACL bootstrap", len(run.m.Jobs))
	}
	job := &run.m.Jobs[0]
	spec := job.Spec.Template.Spec
	if spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Fatalf("Job %s: restartPolicy %q: the rehearsal retries a failed container as OnFailure does", job.Name, spec.RestartPolicy)
	}
	mounts := jobMounts(t, run, job)
	env := proccluster.Env("SLUICE_HOSTS=" + strings.Join(rehearsalHosts(run.m, run.sts), ","))
	var grants []aclGrant
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "sluice" || len(c.Env) > 0 || len(c.EnvFrom) > 0 {
			t.Fatalf("Job container %s: %q with env %v: the rehearsal runs a sluice command without env", c.Name, c.Command, c.Env)
		}
		args := jobArgs(t, run, c, mounts)
		wait.For(t, 60*time.Second, "Job container "+c.Name+" succeeds", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, sluice, args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("sluice %s: %w\n%s", strings.Join(args, " "), err, out)
			}
			t.Logf("Job container %s: sluice %s:\n%s", c.Name, strings.Join(c.Args, " "), out)
			return nil
		})
		g := aclGrant{container: c.Name}
		g.principal, _ = flagValue(c.Args, "allow-principal")
		g.topic, _ = flagValue(c.Args, "topic")
		g.group, _ = flagValue(c.Args, "group")
		g.producer, g.consumer = slices.Contains(c.Args, "--producer"), slices.Contains(c.Args, "--consumer")
		for _, cert := range run.m.Certificates {
			// The pods map a client certificate to User:<its CN>
			// (TestManifestACLBootstrap checks the rule).
			if "User:"+cert.Spec.CommonName == g.principal && !cert.Spec.IsCA && len(cert.Spec.URIs) == 0 {
				g.certSecret = cert.Spec.SecretName
			}
		}
		if g.certSecret == "" || g.topic == "" || g.producer == g.consumer {
			t.Fatalf("Job container %s grants %+v: want a producer or a consumer of a topic, a client Certificate's principal", c.Name, g)
		}
		g.clientOptions = clientCertOptions(t, run, g.certSecret)
		grants = append(grants, g)
	}
	return grants
}

// jobMounts maps the mount path of each of job's Secret volumes to the
// directory standing in for it (the Secret as cert-manager writes it).
func jobMounts(t *testing.T, run *rehearsalRun, job *batchv1.Job) map[string]string {
	t.Helper()
	spec := job.Spec.Template.Spec
	out := map[string]string{}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			var secret string
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && v.Secret != nil {
					secret = v.Secret.SecretName
				}
			}
			if secret == "" {
				t.Fatalf("Job %s: volume %s is not a Secret: the rehearsal has no stand-in for it", job.Name, vm.Name)
			}
			out[vm.MountPath] = run.cm.clientSecret(t, secret)
		}
	}
	return out
}

// jobArgs are c's arguments as the rehearsal runs them: mount paths
// rewritten to their stand-ins, and the port of a Service in --brokers to
// the rehearsal's port of the container port it targets.
func jobArgs(t *testing.T, run *rehearsalRun, c corev1.Container, mounts map[string]string) []string {
	t.Helper()
	var out []string
	for _, a := range c.Args {
		if strings.Contains(a, "$(") {
			t.Fatalf("Job container %s: argument %q references a variable the rehearsal does not set", c.Name, a)
		}
		name, value, isFlag := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") || !isFlag {
			out = append(out, a)
			continue
		}
		for mountPath, standIn := range mounts {
			if rest, ok := strings.CutPrefix(value, mountPath+"/"); ok {
				value = filepath.Join(standIn, rest)
			}
		}
		if name == "brokers" {
			var addrs []string
			for _, addr := range strings.Split(value, ",") {
				addrs = append(addrs, serviceAddr(t, run, addr))
			}
			value = strings.Join(addrs, ",")
		}
		out = append(out, "--"+name+"="+value)
	}
	return out
}

// serviceAddr is addr (a client Service's name and port) with the port
// the rehearsal's pods serve that Service port on: the Service's
// targetPort, by name or number, mapped to the rehearsal's free port.
func serviceAddr(t *testing.T, run *rehearsalRun, addr string) string {
	t.Helper()
	host, portText, ok := strings.Cut(addr, ":")
	port, err := strconv.Atoi(portText)
	svc := run.m.service(strings.Split(host, ".")[0])
	if !ok || err != nil || svc == nil {
		t.Fatalf("--brokers %s is not a Service of the overlay and a port", addr)
	}
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) != port {
			continue
		}
		target := int(sp.TargetPort.IntVal)
		if sp.TargetPort.Type == intstr.String {
			for _, cp := range run.sts.Spec.Template.Spec.Containers[0].Ports {
				if cp.Name == sp.TargetPort.StrVal {
					target = int(cp.ContainerPort)
				}
			}
		}
		mapped, ok := run.pods[0].pod.Ports[target]
		if !ok {
			t.Fatalf("Service %s port %d targets %s, no container port of the pods", svc.Name, port, sp.TargetPort.String())
		}
		return host + ":" + strconv.Itoa(mapped)
	}
	t.Fatalf("Service %s has no port %d", svc.Name, port)
	return ""
}

// strangerOptions are the client options of a principal no ACL names: a
// fresh client certificate of the cluster's CA (User:stranger).
func strangerOptions(t *testing.T, run *rehearsalRun) []client.Option {
	t.Helper()
	dir := filepath.Join(run.cm.dir, "stranger")
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err != nil {
		certPEM, keyPEM, err := auth.CreateClient(run.cm.ca, auth.ClientOptions{User: "stranger", Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeSecret(dir, 0o400, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": run.cm.caPEM}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := client.LoadTLSConfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	return []client.Option{client.WithTLS(cfg)}
}

// rehearsalClient is a client of the rehearsed cluster with opts,
// bootstrapping from the pods' advertised names; the caller closes it.
func rehearsalClient(t *testing.T, run *rehearsalRun, opts []client.Option) *client.Client {
	t.Helper()
	var bootstrap []string
	for _, pp := range run.pods {
		adv, _ := pp.pod.setting("advertise")
		bootstrap = append(bootstrap, adv)
	}
	cl, err := client.New(bootstrap, append([]client.Option{client.WithRequestTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// isDenied reports whether err is an authorization refusal
// (TOPIC_AUTHORIZATION_FAILED, GROUP_..., CLUSTER_..., or gRPC's
// PERMISSION_DENIED for a request refused as a whole).
func isDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "AUTHORIZATION_FAILED") || strings.Contains(err.Error(), "PermissionDenied"))
}

// sendOne sends one record to topic with cl's idempotent producer and
// returns the outcome (a refusal fails at once; anything else within 10 s).
func sendOne(t *testing.T, cl *client.Client, topic, value string) error {
	t.Helper()
	p, err := cl.NewProducer(client.WithDeliveryTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err = p.SendSync(ctx, client.Record{Topic: topic, Value: []byte(value)})
	return err
}

// pollOutcome polls co (assigned or subscribed) for up to 20 s until it
// reads records (returned) or fails with an authorization refusal
// (returned as err). Other errors are retried: the group may be forming.
func pollOutcome(t *testing.T, co *client.Consumer, want int) ([]client.Record, error) {
	t.Helper()
	var got []client.Record
	var last error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		recs, err := co.Poll(ctx)
		cancel()
		got = append(got, recs...)
		if len(got) >= want {
			return got, nil
		}
		if isDenied(err) {
			return got, err
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
	}
	t.Fatalf("neither %d records nor a refusal in 20 s: %d records, last error %v", want, len(got), last)
	return nil, nil
}

// checkACLBootstrap runs the overlay's ACL bootstrap Job against the
// rehearsed cluster (runACLBootstrapJob) and checks what the brokers then
// allow (--authorizer acl, the administrator the only super user), with
// the client certificates of the principals it grants:
//
//   - the producer may create and write its topic, but not read it, nor
//     write another topic (created by the administrator);
//   - the consumer may read its topic in its group and commit there, but
//     not write the topic, nor join another group;
//   - a third principal, a fresh client certificate of the same CA, may
//     do none of it: write, read, join the group, create a topic, or
//     describe the cluster.
//
// It returns the grants, for checkACLsAfterRoll.
func checkACLBootstrap(t *testing.T, run *rehearsalRun, sluice string) []aclGrant {
	t.Helper()
	start := time.Now()
	grants := runACLBootstrapJob(t, run, sluice)
	var prod, cons *aclGrant
	for i := range grants {
		switch {
		case grants[i].producer:
			prod = &grants[i]
		case grants[i].consumer:
			cons = &grants[i]
		}
	}
	if prod == nil || cons == nil || prod.topic != cons.topic || cons.group == "" {
		t.Fatalf("the Job grants %+v: want a producer and a consumer (with a group) of one topic", grants)
	}
	topic, other := prod.topic, prod.topic+"-other"
	admin := rehearsalClient(t, run, tlsClientOptions(t, run))
	defer admin.Close()
	producer := rehearsalClient(t, run, prod.clientOptions)
	defer producer.Close()
	consumer := rehearsalClient(t, run, cons.clientOptions)
	defer consumer.Close()
	stranger := rehearsalClient(t, run, strangerOptions(t, run))
	defer stranger.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The producer creates its topic (--producer grants Create) and
	// writes it; the administrator creates another.
	if err := producer.CreateTopic(ctx, topic, 1, 3, nil); err != nil {
		t.Fatalf("%s creates %s: %v", prod.principal, topic, err)
	}
	if err := admin.CreateTopic(ctx, other, 1, 3, nil); err != nil {
		t.Fatalf("the administrator creates %s: %v", other, err)
	}
	const records = 5
	for i := range records {
		if err := sendOne(t, producer, topic, fmt.Sprintf("acl-%d", i)); err != nil {
			t.Fatalf("%s writes %s: %v", prod.principal, topic, err)
		}
	}
	if err := sendOne(t, producer, other, "x"); !isDenied(err) {
		t.Errorf("%s writes %s: %v, want an authorization failure", prod.principal, other, err)
	}
	readAssigned := func(cl *client.Client) ([]client.Record, error) {
		co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		if err := co.Assign(topic, 0, client.OffsetEarliest); err != nil {
			t.Fatal(err)
		}
		return pollOutcome(t, co, records)
	}
	if recs, err := readAssigned(producer); !isDenied(err) || len(recs) > 0 {
		t.Errorf("%s reads %s: %d records, %v; want an authorization failure", prod.principal, topic, len(recs), err)
	}

	// The consumer reads in its group and commits, but may not write,
	// nor join another group.
	readInGroup := func(cl *client.Client, group string) ([]client.Record, error) {
		co, err := cl.NewConsumer(client.WithGroup(group), client.WithAutoCommit(false, 0), client.WithAutoOffsetReset(client.OffsetEarliest),
			client.WithMaxWait(100*time.Millisecond), client.WithGroupCloseTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		if err := co.Subscribe(topic); err != nil {
			t.Fatal(err)
		}
		recs, err := pollOutcome(t, co, records)
		if err == nil {
			err = co.Commit(ctx)
		}
		return recs, err
	}
	if recs, err := readInGroup(consumer, cons.group); err != nil || len(recs) != records {
		t.Errorf("%s reads %s in group %s and commits: %d records, %v; want %d", cons.principal, topic, cons.group, len(recs), err, records)
	}
	if recs, err := readInGroup(consumer, cons.group+"-other"); !isDenied(err) || len(recs) > 0 {
		t.Errorf("%s reads %s in group %s-other: %d records, %v; want an authorization failure", cons.principal, topic, cons.group, len(recs), err)
	}
	if err := sendOne(t, consumer, topic, "x"); !isDenied(err) {
		t.Errorf("%s writes %s: %v, want an authorization failure", cons.principal, topic, err)
	}

	// A principal no ACL names: nothing.
	if err := sendOne(t, stranger, topic, "x"); !isDenied(err) {
		t.Errorf("User:stranger writes %s: %v, want an authorization failure", topic, err)
	}
	if recs, err := readAssigned(stranger); !isDenied(err) || len(recs) > 0 {
		t.Errorf("User:stranger reads %s: %d records, %v; want an authorization failure", topic, len(recs), err)
	}
	if recs, err := readInGroup(stranger, cons.group); !isDenied(err) || len(recs) > 0 {
		t.Errorf("User:stranger reads %s in group %s: %d records, %v; want an authorization failure", topic, cons.group, len(recs), err)
	}
	if err := stranger.CreateTopic(ctx, "stranger", 1, 3, nil); !isDenied(err) {
		t.Errorf("User:stranger creates a topic: %v, want an authorization failure", err)
	}
	if _, err := stranger.DescribeCluster(ctx); !isDenied(err) {
		t.Errorf("User:stranger describes the cluster: %v, want an authorization failure", err)
	}
	t.Logf("ACL bootstrap Job run and its grants checked in %v", time.Since(start).Round(time.Millisecond))
	return grants
}

// checkACLsAfterRoll checks that the ACLs the bootstrap Job created (in
// the controllers' Raft metadata) hold after every pod was recreated: the
// producer still writes its topic, and the stranger still may not.
func checkACLsAfterRoll(t *testing.T, run *rehearsalRun, grants []aclGrant) {
	t.Helper()
	for _, g := range grants {
		if !g.producer {
			continue
		}
		producer := rehearsalClient(t, run, g.clientOptions)
		defer producer.Close()
		if err := sendOne(t, producer, g.topic, "after the roll"); err != nil {
			t.Errorf("%s writes %s after the roll: %v", g.principal, g.topic, err)
		}
		stranger := rehearsalClient(t, run, strangerOptions(t, run))
		defer stranger.Close()
		if err := sendOne(t, stranger, g.topic, "x"); !isDenied(err) {
			t.Errorf("User:stranger writes %s after the roll: %v, want an authorization failure", g.topic, err)
		}
	}
}
