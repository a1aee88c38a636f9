package membership

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// memberlistLevels maps memberlist's line prefixes to slog levels. Its
// [ERR] lines are mostly failed sends to peers that are down, which the
// protocol expects and handles, so they go to Warn; what needs an
// operator (a node id conflict) is logged at Error by this package.
var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelWarn},
	{"[ERROR]", slog.LevelWarn},
}

// logWriter turns memberlist's *log.Logger output, one Write per line, into
// slog records.
type logWriter struct {
	log *slog.Logger
}

// newMemberlistLogger returns the *log.Logger to hand memberlist.
func newMemberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(logWriter{log: l}, "", 0)
}

// Write logs one line. It never fails.
func (w logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			level, line = l.level, strings.TrimSpace(rest)
			break
		}
	}
	// Most lines say "memberlist: " already, a few do not; say it once.
	line = strings.TrimPrefix(line, "memberlist: ")
	w.log.Log(context.Background(), level, "memberlist: "+line)
	return len(p), nil
}
