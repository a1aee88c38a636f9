package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

const protoPath = "../../proto/sluice/v1/errors.proto"

// docs/errors.md is what the generator makes of errors.proto now (CI also
// regenerates it and fails on a diff).
func TestErrorsDocIsCurrent(t *testing.T) {
	var got bytes.Buffer
	if err := render(&got, protoPath); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Error("docs/errors.md is stale: run make proto (or go run ./scripts/gen-errors-doc > docs/errors.md)")
	}
}

// The meaning of a code is the // block right above its value, joined
// into one line; a blank or code line in between ends it.
func TestMeaningsFromComments(t *testing.T) {
	src := `enum Other {
  // not this one
  NONE = 0;
}
enum ErrorCode {
  // First line
  // second line.
  NONE = 0;

  UNDOCUMENTED = 1 [(retriable) = true];
  // Retriable | piped.
  RETRY = 2 [(retriable) = true];
}
`
	path := t.TempDir() + "/errors.proto"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := meanings(path)
	if err != nil {
		t.Fatal(err)
	}
	if m["NONE"] != "First line second line." || m["UNDOCUMENTED"] != "" || m["RETRY"] != "Retriable | piped." {
		t.Errorf("meanings = %q", m)
	}
	real, err := meanings(protoPath)
	if err != nil {
		t.Fatal(err)
	}
	if d := real["DUPLICATE_SEQUENCE_NUMBER"]; !strings.Contains(d, "Not sent by Sluice") || !strings.Contains(d, "original") {
		t.Errorf("DUPLICATE_SEQUENCE_NUMBER's meaning does not say what the broker does: %q", d)
	}
}
