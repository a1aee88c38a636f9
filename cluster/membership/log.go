package membership

import (
	"log"
	"log/slog"

	"github.com/sluice-io/sluice/internal/leveledlog"
)

// memberlistLevels maps memberlist's line prefixes to slog levels. Its
// [ERR] lines are mostly failed sends to peers that are down, which the
// protocol expects and handles, so they go to Warn; what needs an
// operator (a node id conflict) is logged at Error by this package.
var memberlistLevels = []leveledlog.Level{
	{Prefix: "[DEBUG]", Level: slog.LevelDebug},
	{Prefix: "[INFO]", Level: slog.LevelInfo},
	{Prefix: "[WARN]", Level: slog.LevelWarn},
	{Prefix: "[ERR]", Level: slog.LevelWarn},
	{Prefix: "[ERROR]", Level: slog.LevelWarn},
}

// newMemberlistLogger returns the *log.Logger to hand memberlist. Most
// of its lines say "memberlist: " already, a few do not; every record
// says it once.
func newMemberlistLogger(l *slog.Logger) *log.Logger {
	w := leveledlog.Writer{Log: l, Levels: memberlistLevels, Trim: "memberlist: ", Prefix: "memberlist: "}
	return log.New(w, "", 0)
}
