// Package leveledlog turns the text lines of libraries that log through a
// writer with a level prefix ("[ERROR] ...": hashicorp/raft's hclog,
// memberlist's log.Logger) into log/slog records at the matching level.
package leveledlog

import (
	"context"
	"log/slog"
	"strings"
)

// Level maps a line prefix to a slog level.
type Level struct {
	Prefix string
	Level  slog.Level
}

// Writer is an io.Writer that logs each Write (one line) to Log at the
// level of the first Levels entry whose prefix starts the line (the
// prefix removed), else at Info. Trim is removed from the start of the
// rest and Prefix put in its place, so that every line names its source
// once. It never fails.
type Writer struct {
	Log    *slog.Logger
	Levels []Level
	Trim   string
	Prefix string
}

// Write logs one line.
func (w Writer) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range w.Levels {
		if rest, ok := strings.CutPrefix(line, l.Prefix); ok {
			level, line = l.Level, strings.TrimSpace(rest)
			break
		}
	}
	if w.Trim != "" {
		line = strings.TrimPrefix(line, w.Trim)
	}
	w.Log.Log(context.Background(), level, w.Prefix+line)
	return len(p), nil
}
