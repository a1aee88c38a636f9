package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
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
// came from, and exits. A value a setting refuses is reported with what
// the setting takes and where the value came from (the file and line,
// the variable, the flag).

// Where a setting's value came from.
const (
	sourceDefault = "default"
	sourceFile    = "file"
	sourceEnv     = "env"
	sourceFlag    = "flag"
)

// origin is where one setting's value came from.
type origin struct {
	source string // sourceDefault (the zero origin), sourceFile, sourceEnv or sourceFlag
	path   string // the config file (sourceFile)
	line   int    // the setting's line in it; 0 when not known
}

// where names the setting name at o, for an error about its value: the
// config file (and line), the SLUICE_* variable or the flag.
func (o origin) where(name string) string {
	switch o.source {
	case sourceFile:
		if o.line > 0 {
			return fmt.Sprintf("config file %s, line %d: %s", o.path, o.line, name)
		}
		return fmt.Sprintf("config file %s: %s", o.path, name)
	case sourceEnv:
		return "environment variable " + envName(name)
	case sourceFlag:
		return "flag --" + name
	}
	return "default of --" + name
}

// configOut is where --print-config writes (tests replace it).
var configOut io.Writer = os.Stdout

// usageOut is where -h writes the usage (tests replace it).
var usageOut io.Writer = os.Stderr

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
// records their origins. Unknown keys, and values a flag refuses, are
// errors naming the file, the line and the key.
func applyConfigFile(fs *flag.FlagSet, path string, origins map[string]origin) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	lines := keyLines(data)
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		o := origin{source: sourceFile, path: path, line: lines[k]}
		f := fs.Lookup(k)
		if f == nil || k == "config" || k == "print-config" {
			return fmt.Errorf("%s is not a setting (settings are sluiced's flag names, e.g. data-dir)", o.where(strconv.Quote(k)))
		}
		v, err := configValue(doc[k])
		if err != nil {
			return fmt.Errorf("%s: %w", o.where(k), err)
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("%s: %w", o.where(k), err)
		}
		origins[k] = o
	}
	return nil
}

// keyLines returns the line (from 1) of each key at the top level of a
// YAML mapping written in block style, one "key: value" a line, as
// sluiced's files are; for error messages only. A key it cannot place (a
// flow-style or JSON document) is absent.
func keyLines(data []byte) map[string]int {
	out := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.ContainsRune(" \t#-{[", rune(line[0])) {
			continue // indented, a comment, a list item, a document marker or flow style
		}
		key, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key = strings.Trim(strings.TrimSpace(key), `"'`)
		if _, seen := out[key]; !seen {
			out[key] = i + 1
		}
	}
	return out
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
	case map[string]any:
		return "", errors.New("a mapping is not a setting's value (want a string, a number, true or false, or a list)")
	}
	return "", fmt.Errorf("a %T is not a setting's value", v)
}

// printConfig writes every setting's effective value and its source,
// sorted by name, as YAML-like lines a file can take back.
func printConfig(w io.Writer, fs *flag.FlagSet, origins map[string]origin) {
	var b bytes.Buffer
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "print-config" {
			return
		}
		src := origins[f.Name].source
		if src == "" {
			src = sourceDefault
		}
		fmt.Fprintf(&b, "%s: %q # %s\n", f.Name, f.Value.String(), src)
	})
	_, _ = w.Write(b.Bytes())
}

// A setting is one flag of sluiced with what its values must look like.
// configure wraps every flag's value in one after registering the flags
// (so a flag added later is covered too): a value refused, from any
// source, is reported with what was expected and where it came from, and
// the usage shows each flag's type and real default.
type setting struct {
	flag.Value
	kind
	refused error // the error of the last value refused (see refusedFlag)
}

// kind is what a setting takes.
type kind struct {
	typ  string // the type the usage shows: duration, int, ...; "" for a bool
	want string // what a value must be, to complete "x is not ..."
	zero string // the unset value's text: the usage shows no default for it
}

// kindedValue is a flag.Value of sluiced's own that says what it takes.
type kindedValue interface {
	flag.Value
	kind() kind
}

// kindOf returns the kind of v, one of the flag package's values (known by
// the type name flag.UnquoteUsage gives them) or a kindedValue.
func kindOf(v flag.Value) kind {
	if kv, ok := v.(kindedValue); ok {
		return kv.kind()
	}
	switch typ, _ := flag.UnquoteUsage(&flag.Flag{Value: v}); typ {
	case "":
		return kind{"", "true or false", "false"}
	case "duration":
		return kind{typ, "a duration such as 5s, 250ms or 1m30s", "0s"}
	case "int", "uint":
		return kind{typ, "an integer", "0"}
	case "float":
		return kind{typ, "a number such as 0.5", "0"}
	case "string":
		return kind{typ, "a string", ""}
	}
	return kind{"value", "a valid value", ""}
}

// wrapSettings makes every flag of fs a setting.
func wrapSettings(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = &setting{Value: f.Value, kind: kindOf(f.Value)} })
}

// Set sets the value, or refuses it with a *valueError saying what was
// expected.
func (s *setting) Set(v string) error {
	err := s.Value.Set(v)
	if err == nil {
		return nil
	}
	var ve *valueError
	if !errors.As(err, &ve) {
		ve = &valueError{value: v, want: s.want}
		if msg := err.Error(); msg != "parse error" { // the flag package's; other errors say more
			ve.note = msg
		}
		if s.typ == "duration" {
			if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
				ve.note = "a number needs a unit: s, ms, m, h"
			}
		}
	}
	s.refused = ve
	return ve
}

// IsBoolFlag tells the flag package that a bool setting needs no value.
func (s *setting) IsBoolFlag() bool {
	b, ok := s.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// refusedFlag returns the error of the setting of fs that refused its
// value from the command line, after fs.Parse failed: the flag package's
// own error names the flag in its own words and drops what we said.
func refusedFlag(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if s, ok := f.Value.(*setting); ok && s.refused != nil && err == nil {
			err = fmt.Errorf("%s: %w", origin{source: sourceFlag}.where(f.Name), s.refused)
		}
	})
	return err
}

// valueError is a value a setting refused.
type valueError struct {
	value string
	want  string // what the setting takes: "a duration such as 5s"
	note  string // more on what is wrong, or ""
}

func (e *valueError) Error() string {
	msg := fmt.Sprintf("%q is not %s", e.value, e.want)
	if e.note != "" {
		msg += " (" + e.note + ")"
	}
	return msg
}

// printUsage writes sluiced's usage: each flag laid out as
// flag.PrintDefaults does ("  -name type", its text indented below it),
// with its default unless that is the unset value ("", 0, false).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	b.WriteString("usage: sluiced [flags]\n\nRuns a Sluice node. Every flag may also be given as SLUICE_<FLAG> in the environment\n" +
		"(e.g. SLUICE_DATA_DIR), or by its name in the --config file.\n\n")
	fs.VisitAll(func(f *flag.Flag) {
		k := kindOf(f.Value) // a flag not wrapped (yet)
		if s, ok := f.Value.(*setting); ok {
			k = s.kind
		}
		fmt.Fprintf(&b, "  -%s", f.Name)
		if k.typ != "" {
			b.WriteString(" " + k.typ)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(f.Usage, "\n", "\n    \t"))
		switch {
		case f.DefValue == k.zero:
		case k.typ == "string":
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	_, _ = io.WriteString(w, b.String())
}

// int32Value is a flag.Value for an int32 field of node.Config.
type int32Value int32

func (v *int32Value) String() string {
	if v == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*v), 10)
}

func (v *int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if errors.Is(err, strconv.ErrRange) {
		return &valueError{value: s, want: fmt.Sprintf("an integer from %d to %d", math.MinInt32, math.MaxInt32)}
	}
	if err != nil {
		return &valueError{value: s, want: "an integer"}
	}
	*v = int32Value(n)
	return nil
}

func (v *int32Value) kind() kind { return kind{"int", "an integer", "0"} }

// choiceValue is a string flag that takes the values its check accepts:
// a fixed set of words, said by want.
type choiceValue struct {
	value string
	want  string // "one of debug, info, warn, error"
	check func(string) error
}

func (v *choiceValue) String() string {
	if v == nil {
		return ""
	}
	return v.value
}

func (v *choiceValue) Set(s string) error {
	if err := v.check(s); err != nil {
		return &valueError{value: s, want: v.want}
	}
	v.value = s
	return nil
}

func (v *choiceValue) kind() kind { return kind{"string", v.want, ""} }
