// Package golden compares test output with committed files under
// testdata/ and rewrites them when tests run with -update (STYLE 15):
//
//	go test ./client/ -run Vectors -update
//
// A test package that imports golden must not define its own -update flag.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Updating reports whether the test binary runs with -update.
func Updating() bool { return *update }

// Check compares got with the file at path (relative to the test's package
// directory, usually testdata/NAME), writing got there first under
// -update. A missing or different file fails the test, naming the flag.
func Check(tb testing.TB, path string, got []byte) {
	tb.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("%s differs from what the code computes now (run the test with -update and review the diff):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// JSON encodes doc (a struct) as a JSON object for a golden file: one
// field per line in struct order, and the array field named list with one
// element per line, so that a diff shows which vector changed. HTML
// characters are not escaped.
func JSON(tb testing.TB, doc any, list string) []byte {
	tb.Helper()
	b := marshal(tb, doc)
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		tb.Fatal(err)
	}
	var out strings.Builder
	out.WriteString("{")
	for first := true; dec.More(); first = false {
		tok, err := dec.Token()
		if err != nil {
			tb.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			tb.Fatal(err)
		}
		if !first {
			out.WriteString(",")
		}
		fmt.Fprintf(&out, "\n  %s: ", marshal(tb, tok))
		if tok != list {
			out.Write(v)
			continue
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			tb.Fatalf("field %s is not an array: %v", list, err)
		}
		out.WriteString("[")
		for i, e := range elems {
			if i > 0 {
				out.WriteString(",")
			}
			out.WriteString("\n    ")
			out.Write(e)
		}
		out.WriteString("\n  ]")
	}
	out.WriteString("\n}\n")
	return []byte(out.String())
}

func marshal(tb testing.TB, v any) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
