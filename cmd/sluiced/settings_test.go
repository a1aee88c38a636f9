package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/node"
)

// helpFlag is one flag as sluiced -h describes it.
type helpFlag struct {
	name, typ string
	text      string // the usage text, the stated default included
	def       string // the default the text states (unquoted)
	stated    bool   // whether it states one
}

var (
	helpLine    = regexp.MustCompile(`^  -([a-z0-9-]+)(?: ([a-z]+))?$`)
	helpDefault = regexp.MustCompile(` \(default ("(?:[^"\\]|\\.)*"|[^():\s][^()]*)\)$`)
	// A default written by hand in a usage text ("default 50"), which
	// would not follow the real one.
	handDefault = regexp.MustCompile(`default:? [0-9"]`)
)

// usage returns sluiced -h's description of every flag, by name.
func usage(t *testing.T) map[string]helpFlag {
	t.Helper()
	var out bytes.Buffer
	usageOut = &out
	defer func() { usageOut = os.Stderr }()
	if _, err := configure([]string{"-h"}, noEnv); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	flags := map[string]helpFlag{}
	var cur *helpFlag
	for _, line := range strings.Split(out.String(), "\n") {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			cur = &helpFlag{name: m[1], typ: m[2]}
			flags[cur.name] = *cur
			continue
		}
		text, ok := strings.CutPrefix(line, "    \t")
		if !ok || cur == nil {
			continue
		}
		cur.text += text
		if m := helpDefault.FindStringSubmatch(text); m != nil {
			cur.def, cur.stated = m[1], true
			if cur.typ == "string" {
				def, err := strconv.Unquote(m[1])
				if err != nil {
					t.Fatalf("-%s: default %s is not quoted: %v", cur.name, m[1], err)
				}
				cur.def = def
			}
		}
		flags[cur.name] = *cur
	}
	if len(flags) < 40 || flags["data-dir"].def != "./sluice-data" {
		t.Fatalf("-h lists %d flags (data-dir %+v):\n%s", len(flags), flags["data-dir"], out.String())
	}
	return flags
}

// printedSetting is one line of --print-config.
type printedSetting struct{ value, source string }

var printedLine = regexp.MustCompile(`^([a-z0-9-]+): ("(?:[^"\\]|\\.)*") # (.+)$`)

// printConfigOf runs configure with args and env and --print-config, and
// returns what it printed, by setting, and the raw output.
func printConfigOf(t *testing.T, args []string, env func(string) (string, bool)) (map[string]printedSetting, string) {
	t.Helper()
	var out bytes.Buffer
	configOut = &out
	defer func() { configOut = os.Stdout }()
	if _, err := configure(append(args, "--print-config"), env); !errors.Is(err, errPrintedConfig) {
		t.Fatalf("%q --print-config: %v", args, err)
	}
	settings := map[string]printedSetting{}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		m := printedLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("--print-config line %q is not `name: \"value\" # source`", line)
		}
		v, err := strconv.Unquote(m[2])
		if err != nil {
			t.Fatal(err)
		}
		settings[m[1]] = printedSetting{v, m[3]}
	}
	return settings, out.String()
}

// zeroOf is the text of each type's unset value: -h states no default
// for a flag whose default is that.
var zeroOf = map[string]string{"": "false", "string": "", "duration": "0s", "int": "0", "uint": "0", "float": "0"}

// configured is configure(args, env) without the logger (a new one each
// call), for comparing whole configurations.
func configured(t *testing.T, args []string, env func(string) (string, bool)) node.Config {
	t.Helper()
	cfg, err := configure(args, env)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if cfg.Logger == nil {
		t.Fatalf("%q: no logger", args)
	}
	cfg.Logger = nil
	return cfg
}

// Issue 28: for every flag, --print-config with no other input shows the
// default -h states (the type's unset value where -h states none), and
// no usage text carries a default written by hand. New flags are covered
// as they are added.
func TestPrintConfigShowsTheDefaultsHelpStates(t *testing.T) {
	help := usage(t)
	printed, out := printConfigOf(t, nil, noEnv)
	for name, h := range help {
		if name == "config" || name == "print-config" {
			if _, ok := printed[name]; ok {
				t.Errorf("--print-config shows %s", name)
			}
			continue
		}
		p, ok := printed[name]
		if !ok {
			t.Errorf("-%s: not in --print-config:\n%s", name, out)
			continue
		}
		if p.source != sourceDefault {
			t.Errorf("-%s: source %q with no input, want %q", name, p.source, sourceDefault)
		}
		want := h.def
		if !h.stated {
			zero, known := zeroOf[h.typ]
			if !known {
				t.Errorf("-%s: type %q, which this test does not know the unset value of", name, h.typ)
				continue
			}
			want = zero
		}
		if p.value != want {
			t.Errorf("-%s: --print-config shows %q, -h states %q (%s)", name, p.value, want, h.text)
		}
		if n := len(handDefault.FindAllString(h.text, -1)); n > 0 && !(n == 1 && h.stated) {
			t.Errorf("-%s: usage %q states a default by hand; the flag's own default is shown", name, h.text)
		}
	}
	for name := range printed {
		if _, ok := help[name]; !ok {
			t.Errorf("--print-config shows %s, which -h does not list", name)
		}
	}
}

// What --print-config shows is what the node gets: each printed value,
// given back as a flag, as a SLUICE_* variable, or all of them as a
// config file, yields the very Config the node is started with; no
// setting is left at a zero that a lower layer would replace with its
// own default; and the lower layers' defaults are those values.
func TestPrintConfigIsWhatTheNodeUses(t *testing.T) {
	base := configured(t, nil, noEnv)
	printed, out := printConfigOf(t, nil, noEnv)
	for name, p := range printed {
		if got := configured(t, []string{"--" + name + "=" + p.value}, noEnv); !reflect.DeepEqual(got, base) {
			t.Errorf("--%s=%q gives another config than the default:\n%+v\nwant\n%+v", name, p.value, got, base)
		}
		env := envOf(map[string]string{envName(name): p.value})
		if got := configured(t, nil, env); !reflect.DeepEqual(got, base) {
			t.Errorf("%s=%q gives another config than the default:\n%+v\nwant\n%+v", envName(name), p.value, got, base)
		}
	}
	path := filepath.Join(t.TempDir(), "printed.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := configured(t, []string{"--config", path}, noEnv); !reflect.DeepEqual(got, base) {
		t.Errorf("--print-config's output as a config file gives another config:\n%+v\nwant\n%+v", got, base)
	}
	again, _ := printConfigOf(t, []string{"--config", path}, noEnv)
	for name, p := range printed {
		if again[name] != (printedSetting{p.value, sourceFile}) {
			t.Errorf("%s from the file: %+v, want %q from the file", name, again[name], p.value)
		}
	}
	if full := base.WithDefaults(); !reflect.DeepEqual(full, base) {
		t.Errorf("the configured node still has zero settings a lower layer fills in:\n%+v\nwant\n%+v", base, full)
	}

	// The defaults the layers below apply to a zero value.
	ctl := controller.Config{NodeID: 1, DataDir: "d", RaftBind: "127.0.0.1:1"}
	if err := ctl.Validate(); err != nil {
		t.Fatal(err)
	}
	grp := group.Config{}.WithDefaults()
	classic := group.ClassicConfig{}.WithDefaults()
	txnCoord := txn.CoordinatorConfig{}
	if err := txnCoord.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"broker-heartbeat-interval", base.HeartbeatInterval, cluster.DefaultHeartbeatInterval},
		{"broker-session-timeout", base.SessionTimeout, ctl.SessionTimeout},
		{"leader-rebalance-interval", base.LeaderRebalanceInterval, ctl.LeaderRebalanceInterval},
		{"leader-imbalance-threshold", base.LeaderImbalanceThreshold, ctl.LeaderImbalanceThreshold},
		{"replica-lag-time-max", base.ReplicaLagTimeMax, cluster.DefaultReplicaLagTimeMax},
		{"log-cleaner-backoff", base.LogCleanerBackoff, cluster.DefaultCleanerBackoff},
		{"transaction-state-partitions", base.TransactionStatePartitions, txnCoord.StatePartitions},
		{"transaction-max-timeout", base.TransactionMaxTimeout, txnCoord.MaxTimeout},
		{"transaction-max-timeout (replicas)", base.TransactionMaxTimeout, cluster.DefaultTransactionMaxTimeout},
		{"transaction-abort-timed-out-interval", base.TransactionAbortTimedOutInterval, txnCoord.AbortTimedOutInterval},
		{"transactional-id-expiration", base.TransactionalIDExpiration, txnCoord.IDExpiration},
		{"offsets-topic-partitions", base.OffsetsTopicPartitions, int32(group.DefaultOffsetsPartitions)},
		{"group-session-timeout", base.GroupSessionTimeout, grp.SessionTimeout},
		{"group-min-session-timeout", base.GroupMinSessionTimeout, grp.MinSessionTimeout},
		{"group-max-session-timeout", base.GroupMaxSessionTimeout, grp.MaxSessionTimeout},
		{"group-heartbeat-interval", base.GroupHeartbeatInterval, grp.HeartbeatInterval},
		{"offsets-retention", base.OffsetsRetention, group.DefaultOffsetsRetention},
		{"group-initial-rebalance-delay", base.GroupInitialRebalanceDelay, classic.InitialRebalanceDelay},
		{"group-classic-min-session-timeout", base.GroupClassicMinSessionTimeout, classic.MinSessionTimeout},
		{"group-classic-max-session-timeout", base.GroupClassicMaxSessionTimeout, classic.MaxSessionTimeout},
	} {
		if c.got != c.want {
			t.Errorf("--%s: the node is configured with %v, the layer using it defaults to %v", c.name, c.got, c.want)
		}
	}
}

// A zero that stands for a default is shown, and used, as that default.
func TestZeroSettingsShowTheirDefault(t *testing.T) {
	args := []string{"--broker-session-timeout=0", "--transaction-state-partitions=0", "--leader-imbalance-threshold=0"}
	printed, _ := printConfigOf(t, args, noEnv)
	for name, want := range map[string]string{"broker-session-timeout": "2s", "transaction-state-partitions": "50", "leader-imbalance-threshold": "0.1"} {
		if p := printed[name]; p != (printedSetting{want, sourceFlag}) {
			t.Errorf("--%s=0: printed %+v, want %q from the flag", name, p, want)
		}
	}
	if got := configured(t, args, noEnv); got.SessionTimeout != controller.DefaultSessionTimeout || got.TransactionStatePartitions != 50 {
		t.Errorf("zero settings configured as %v, %d", got.SessionTimeout, got.TransactionStatePartitions)
	}
}

// refusedValue is a value a setting refuses and what the error says was
// expected.
type refusedValue struct{ name, value, want string }

// testMachineryRefused are the rows of the testing-only flags, set by
// testflags_test.go in a build with the sluicetest tag.
var testMachineryRefused []refusedValue

// Issue 28: a value a setting refuses is reported with what the setting
// takes and where the value came from: the config file and line, the
// SLUICE_* variable, or the flag. One row per kind of setting.
func TestRefusedValuesSayWhatAndWhere(t *testing.T) {
	for _, tc := range append([]refusedValue{
		{"broker-session-timeout", "5", `"5" is not a duration such as 5s`},
		{"broker-session-timeout", "soon", `"soon" is not a duration such as 5s`},
		{"node-id", "one", `"one" is not an integer`},
		{"node-id", "3000000000", `"3000000000" is not an integer from -2147483648 to 2147483647`},
		{"node-id-offset", "x", `"x" is not an integer`},
		{"page-cache-window", "lots", `"lots" is not an integer`},
		{"leader-imbalance-threshold", "high", `"high" is not a number such as 0.5`},
		{"log-level", "verbose", `"verbose" is not one of debug, info, warn, error`},
		{"log-format", "yaml", `"yaml" is not text or json`},
		{"controller-voters", "x", `controller voter "x": want id@host:port`},
		{"node-id-from-name", "sluice", "does not end in -<ordinal>"},
	}, testMachineryRefused...) {
		dir := t.TempDir()
		path := filepath.Join(dir, "sluiced.yaml")
		// The setting on line 3, after a comment and another setting.
		file := "# sluiced\ndata-dir: " + dir + "\n" + tc.name + ": " + strconv.Quote(tc.value) + "\n"
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, src := range []struct {
			source string
			args   []string
			env    map[string]string
			where  string
		}{
			{sourceFile, []string{"--config", path}, nil, "config file " + path + ", line 3: " + tc.name + ": "},
			{sourceEnv, []string{"--data-dir", dir}, map[string]string{envName(tc.name): tc.value}, "environment variable " + envName(tc.name) + ": "},
			{sourceFlag, []string{"--data-dir", dir, "--" + tc.name + "=" + tc.value}, nil, "flag --" + tc.name + ": "},
		} {
			_, err := configure(src.args, envOf(src.env))
			if err == nil || !strings.HasPrefix(err.Error(), src.where) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s=%q: error %v; want %q ... %q", src.source, tc.name, tc.value, err, src.where, tc.want)
			}
		}
	}
}

// Every flag that is not a free string refuses a value no setting takes,
// from each source, saying what it takes (a new flag of a type sluiced
// does not know fails here until it says).
func TestEveryTypedSettingSaysWhatItTakes(t *testing.T) {
	for name, h := range usage(t) {
		if h.typ == "string" || name == "print-config" {
			continue
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "sluiced.yaml")
		if err := os.WriteFile(path, []byte(name+": \"@\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, src := range []struct {
			args  []string
			env   map[string]string
			where string
		}{
			{[]string{"--config", path}, nil, "config file " + path + ", line 1: " + name + `: "@" is not `},
			{nil, map[string]string{envName(name): "@"}, "environment variable " + envName(name) + `: "@" is not `},
			{[]string{"--" + name + "=@"}, nil, "flag --" + name + `: "@" is not `},
		} {
			_, err := configure(src.args, envOf(src.env))
			if err == nil || !strings.HasPrefix(err.Error(), src.where) || strings.Contains(err.Error(), "a valid value") {
				t.Errorf("-%s (%s) = @: error %v; want it to start %q and say what the setting takes", name, h.typ, err, src.where)
			}
		}
	}
}
