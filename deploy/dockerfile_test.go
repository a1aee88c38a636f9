package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

// imageSluiced is where the image puts sluiced (and the manifests run it).
const imageSluiced = "/usr/local/bin/sluiced"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string
	Line int
}

// parseDockerfile splits a Dockerfile into instructions: comments and
// blank lines dropped, lines ending in \ joined to the next.
func parseDockerfile(text string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continued instruction never ends", start)
	}
	return out, nil
}

// finalStage returns the instructions from the last FROM on.
func finalStage(ins []instruction) []instruction {
	last := 0
	for i, in := range ins {
		if in.Cmd == "FROM" {
			last = i
		}
	}
	return ins[last:]
}

// envOf parses ENV k=v k=v (the form the Dockerfile uses).
func envOfInstruction(args string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Fields(args) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("ENV %q: want key=value pairs", args)
		}
		out[k] = v
	}
	return out, nil
}

// The image: static binaries (CGO off) built in a builder stage, a final
// stage FROM scratch (no base image to download) that runs sluiced as a
// non-root user listed in /etc/passwd, the data dir as a volume, every
// ENV a sluiced flag or the GODEBUG of decision 47, and every port
// sluiced listens on in the manifests exposed with its protocol.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	ins, err := parseDockerfile(string(b))
	if err != nil {
		t.Fatal(err)
	}
	froms := 0
	for _, in := range ins {
		if in.Cmd == "FROM" {
			froms++
		}
		if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			for _, build := range strings.Split(in.Args, "&&") {
				if strings.Contains(build, "go build") && !strings.Contains(build, "CGO_ENABLED=0") {
					t.Errorf("line %d: %q builds without CGO_ENABLED=0: not a static binary for scratch", in.Line, strings.TrimSpace(build))
				}
			}
		}
	}
	if froms < 2 {
		t.Errorf("%d FROM: want a builder stage and a final stage", froms)
	}
	flags := sluicedFlags(t)
	final := finalStage(ins)
	if f := final[0].Args; f != "scratch" {
		t.Errorf("final stage FROM %s: want scratch (no base image to download)", f)
	}
	var user, volume, entrypoint string
	var copies []string
	env := map[string]string{}
	exposed := map[string]bool{}
	for _, in := range final[1:] {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "VOLUME":
			volume = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		case "COPY":
			copies = append(copies, in.Args)
		case "ENV":
			kv, err := envOfInstruction(in.Args)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range kv {
				env[k] = v
				if k == "GODEBUG" {
					continue // the Go runtime's setting (decision 47), checked below
				}
				if f := flagOfEnv(k); f == "" || !flags[f] {
					t.Errorf("ENV %s sets no sluiced flag", k)
				}
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.Args) {
				exposed[p] = true
			}
		}
	}
	if env["GODEBUG"] != "schedtrace=2147483647" {
		t.Errorf("ENV GODEBUG=%q, want schedtrace=2147483647 (decision 47: the image carries it, sluiced does not set it itself)", env["GODEBUG"])
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if !slices.ContainsFunc(copies, func(c string) bool { return strings.HasSuffix(c, " /etc/passwd") }) {
		t.Error("no /etc/passwd in the final stage: the non-root user has no entry")
	}
	if !slices.ContainsFunc(copies, func(c string) bool {
		return strings.Contains(c, "/sluiced") && strings.Contains(c, "/sluice ") && strings.HasSuffix(c, " /usr/local/bin/")
	}) {
		t.Errorf("sluiced and sluice are not both copied to /usr/local/bin/: %q", copies)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) != 1 || ep[0] != imageSluiced {
		t.Errorf("ENTRYPOINT %s: want [%q] in exec form (there is no shell)", entrypoint, imageSluiced)
	}
	if volume != "/var/lib/sluice" || env["SLUICE_DATA_DIR"] != volume {
		t.Errorf("VOLUME %q, SLUICE_DATA_DIR %q: want both /var/lib/sluice", volume, env["SLUICE_DATA_DIR"])
	}
	for _, k := range []string{"SLUICE_LISTEN", "SLUICE_HTTP_LISTEN", "SLUICE_INTERNAL_LISTEN", "SLUICE_KAFKA_LISTEN"} {
		if _, port, err := net.SplitHostPort(env[k]); err != nil || !exposed[port+"/tcp"] {
			t.Errorf("%s=%s: its port is not EXPOSEd", k, env[k])
		}
	}
	m := renderOverlay(t, "combined")
	for _, cp := range m.StatefulSets[0].Spec.Template.Spec.Containers[0].Ports {
		p := fmt.Sprintf("%d/%s", cp.ContainerPort, strings.ToLower(string(protocol(cp.Protocol))))
		if !exposed[p] {
			t.Errorf("container port %s (%s) is not EXPOSEd", cp.Name, p)
		}
	}
}

func TestParseDockerfile(t *testing.T) {
	ins, err := parseDockerfile("# c\nFROM a AS b\n\nRUN x && \\\n  # inner\n  y\nenv A=1 B=2\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []instruction{{"FROM", "a AS b", 2}, {"RUN", "x &&  y", 4}, {"ENV", "A=1 B=2", 7}}
	if !slices.Equal(ins, want) {
		t.Errorf("got %+v, want %+v", ins, want)
	}
	if _, err := parseDockerfile("RUN x \\"); err == nil {
		t.Error("an unterminated continuation was accepted")
	}
}
