// Command sluice is the command-line client of Sluice: topic admin,
// cluster status, produce (optionally in transactions) and consume from
// stdin/stdout (alone or in a consumer group), consumer groups,
// transaction listing, offline segment dumps, benchmarks, the TLS
// certificates of a cluster's CA, nodes and clients, users' SCRAM
// credentials, and ACLs.
//
//	sluice [--brokers host:port,...] [--output text|json] COMMAND [ARGS]
//
// Run "sluice help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/client"
)

const usage = `usage: sluice [--brokers host:port[,...]] [--output text|json] COMMAND [ARGS]

Commands:
  topic create NAME --partitions N --replication-factor R [--config k=v]...
  topic list [--prefix P] [--match GLOB] [--exclude-internal]
  topic describe [NAME...] [--prefix P] [--match GLOB] [--exclude-internal]
                 [--under-replicated-partitions | --under-min-isr-partitions |
                  --at-min-isr-partitions | --unavailable-partitions]
  topic delete NAME
  topic reassign NAME --partition P --replicas 1,2,3 [--wait] [--timeout D]
  cluster status [--offline-replicas-limit N]
  cluster elect-leaders [--topic T [--partition P]...]
  cluster unregister-broker --broker N
  produce TOPIC [--partition P] [--key-separator S] [--acks all|1|0]
          [--transactional-id ID [--commit-every N] [--abort] [--transaction-timeout D]]
  consume TOPIC [--partition P | --group G] [--from-beginning | --offset O] [--max-messages N]
                [--timeout D] [--isolation read_committed|read_uncommitted]
                [--print-offsets] [--print-keys]
  txn list [--state S]... [--producer-id P]... [--min-duration D]
  txn describe ID...
  group list [--state S]...
  group describe GROUP [--isolation read_committed|read_uncommitted]
  group reset-offsets GROUP --topic T (--to-earliest | --to-latest | --to-offset N | --to-datetime T) [--execute]
  group delete GROUP
  dump-log PATH [--records]
  bench produce --topic T [--records N] [--record-size B] [--acks all|1|0] [--create-partitions N] [--sync]
  bench consume --topic T [--records N]
  cert create-ca --certs-dir DIR [--ca-key-file F] [--validity D] [--overwrite]
  cert create-node --certs-dir DIR --name NAME [--cluster-name C] [--host H]... [--validity D] [--overwrite]
  cert create-client --certs-dir DIR --name USER [--org O] [--ou U] [--validity D] [--overwrite]
  cert list --certs-dir DIR
  user create NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N] (--password-file F | --password-stdin)
  user delete NAME [--mechanism M]
  user list [NAME...]
  acl create (--allow-principal P | --deny-principal P)... (--operation OP... | --producer | --consumer) RESOURCE...
  acl list [RESOURCE]... [--resource-pattern-type any|match|literal|prefixed] [--principal P]...
  acl delete (RESOURCE | --principal P)... [--resource-pattern-type T] [--operation OP]...
             RESOURCE: --topic T, --group G, --transactional-id ID or --cluster ("sluice acl" says more)
  quota set ENTITY [--producer-byte-rate N] [--consumer-byte-rate N] [--request-percentage P]
  quota delete ENTITY [--producer-byte-rate] [--consumer-byte-rate] [--request-percentage]
  quota list [--user U | --user-default] [--client-id C | --client-id-default]
             ENTITY: (--user U | --user-default) and/or (--client-id C | --client-id-default)

Global flags (also accepted after the command):
  --brokers   bootstrap brokers, comma separated (env SLUICE_BROKERS, default 127.0.0.1:9400)
  --output    text or json, for commands that print results
  --request-timeout  how long one request may take, retries included (default 30s)
  --tls, --tls-ca-file F, --tls-cert-file F, --tls-key-file F, --tls-server-name N
              connect with TLS: the brokers' CA (default: the system's), a client
              certificate, the name to check (env SLUICE_TLS, SLUICE_TLS_CA_FILE, ...)
  --sasl-mechanism M, --sasl-username U, --sasl-password-file F
              authenticate with SCRAM-SHA-256 or SCRAM-SHA-512 (over TLS; the password
              from the file or SLUICE_SASL_PASSWORD, never a flag)
  --sasl-mechanism OAUTHBEARER --sasl-token-file F
              send a bearer token (JWT), the file read at each call (or SLUICE_SASL_TOKEN)
  --command-config F  key=value file of these settings (env SLUICE_COMMAND_CONFIG)

Run "sluice COMMAND --help" for a command's flags.
`

// globals are the flags shared by every command.
type globals struct {
	brokers string
	output  string
	timeout time.Duration
	// clientID is sent with every request (client quotas); "" none. Set
	// by the commands with a --client-id flag (produce, consume, bench):
	// "quota" has a --client-id of its own, so it is no global flag.
	clientID string
	sec      security
	// test are the testing-only settings, from the environment (none in
	// the shipped build: testflags.go).
	test testMachineryFlags
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.brokers, "brokers", g.brokers, "bootstrap brokers, comma separated (env SLUICE_BROKERS)")
	fs.StringVar(&g.output, "output", g.output, "output format: text or json")
	fs.DurationVar(&g.timeout, "request-timeout", g.timeout, "how long one request may take, retries included")
	g.sec.register(fs)
}

func (g *globals) validate() error {
	if g.output != "text" && g.output != "json" {
		return fmt.Errorf("--output must be text or json, got %q", g.output)
	}
	if g.timeout <= 0 {
		return fmt.Errorf("--request-timeout must be > 0, got %v", g.timeout)
	}
	return g.test.apply()
}

func (g *globals) json() bool { return g.output == "json" }

// client connects to the brokers. A malformed address fails here, naming
// the flag, before anything is dialed.
func (g *globals) client() (*client.Client, error) {
	addrs := strings.Split(g.brokers, ",")
	for i, a := range addrs {
		addrs[i] = strings.TrimSpace(a)
	}
	opts, err := g.sec.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, client.WithDialTimeout(5*time.Second), client.WithRequestTimeout(g.timeout))
	if g.clientID != "" {
		opts = append(opts, client.WithClientID(g.clientID))
	}
	c, err := client.New(addrs, opts...)
	var bad *client.BrokerAddrError
	if errors.As(err, &bad) {
		return nil, fmt.Errorf("--brokers: %w", err)
	}
	return c, err
}

// errUsage marks an error already explained by usage text (exit 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// run executes one command line.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	g, err := newGlobals(args, os.LookupEnv)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cmd, rest := rest[0], rest[1:]
	env := &env{g: g, stdin: stdin, stdout: stdout, stderr: stderr}
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "topic":
		return env.topic(ctx, rest)
	case "cluster":
		return env.cluster(ctx, rest)
	case "produce":
		return env.produce(ctx, rest)
	case "consume":
		return env.consume(ctx, rest)
	case "txn":
		return env.txn(ctx, rest)
	case "group":
		return env.group(ctx, rest)
	case "dump-log":
		return env.dumpLog(rest)
	case "bench":
		return env.bench(ctx, rest)
	case "cert":
		return env.cert(ctx, rest)
	case "user":
		return env.user(ctx, rest)
	case "acl":
		return env.acl(ctx, rest)
	case "quota":
		return env.quota(ctx, rest)
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

// env is what a command runs with.
type env struct {
	g      *globals
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// newFlags returns a command's flag set with the global flags registered
// and its usage line.
func (e *env) newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	e.g.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: sluice %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args allowing flags before, between and after positional
// arguments, and checks the positional count (npos < 0: any count).
func (e *env) parse(fs *flag.FlagSet, args []string, npos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if npos >= 0 && len(pos) != npos {
		fs.Usage()
		return nil, errUsage
	}
	if err := e.g.validate(); err != nil {
		return nil, err
	}
	return pos, nil
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// subcommand runs the command of args[0] among cmds (a command group such
// as `sluice topic`), or prints usage: for no argument or an unknown
// command as a usage error, for -h, --help and help as asked.
func (e *env) subcommand(ctx context.Context, group, usage string, args []string, cmds map[string]func(context.Context, []string) error) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, usage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	if run, ok := cmds[args[0]]; ok {
		return run(ctx, args[1:])
	}
	fmt.Fprintf(e.stderr, "sluice: unknown %s command %q\n\n%s", group, args[0], usage)
	return errUsage
}
