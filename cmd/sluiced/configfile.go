package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The optional configuration file (issue 18): YAML whose keys are the
// flags' names and whose values are what the flag takes (a list may be a
// YAML list: it is joined with commas). Sources, lowest first: the
// defaults, the file (--config or SLUICE_CONFIG), SLUICE_* variables,
// the command line. --print-config shows the result and where each value
// came from, and exits.

// Where a setting's value came from.
const (
	sourceDefault = "default"
	sourceFile    = "file"
	sourceEnv     = "env"
	sourceFlag    = "flag"
)

// configOut is where --print-config writes (tests replace it).
var configOut io.Writer = os.Stdout

// errPrintedConfig is configure's answer after --print-config printed the
// configuration: main exits 0 without starting the node.
var errPrintedConfig = errors.New("configuration printed")

// configFileArg returns the --config value of args, else SLUICE_CONFIG's
// ("" when neither), looking at args before they are parsed.
func configFileArg(args []string, lookupEnv func(string) (string, bool)) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	v, _ := lookupEnv(envName("config"))
	return v
}

// applyConfigFile sets the flags of fs named in the YAML file at path and
// records them in sources. Unknown keys, and values a flag refuses, are
// errors naming the file and the key.
func applyConfigFile(fs *flag.FlagSet, path string, sources map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" || k == "print-config" {
			return fmt.Errorf("--config %s: %q is not a setting (settings are sluiced's flag names, e.g. data-dir)", path, k)
		}
		v, err := configValue(doc[k])
		if err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, k, err)
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("--config %s: %s: %q: %w", path, k, v, err)
		}
		sources[k] = sourceFile
	}
	return nil
}

// configValue renders a YAML value as a flag value.
func configValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := configValue(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("a %T is not a flag value", v)
}

// printConfig writes every setting's effective value and its source,
// sorted by name, as YAML-like lines a file can take back.
func printConfig(w io.Writer, fs *flag.FlagSet, sources map[string]string) {
	var b bytes.Buffer
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "print-config" {
			return
		}
		src := sources[f.Name]
		if src == "" {
			src = sourceDefault
		}
		fmt.Fprintf(&b, "%s: %q # %s\n", f.Name, f.Value.String(), src)
	})
	_, _ = w.Write(b.Bytes())
}
