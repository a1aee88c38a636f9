package docscheck

import (
	"regexp"
	"slices"
	"strings"
)

// helpFlag is a flag line of Go's flag.PrintDefaults ("  -name type").
var helpFlag = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)`)

// HelpFlags returns the flag names, without dashes, that a program's
// --help output (Go's flag package) lists.
func HelpFlags(help string) []string {
	var out []string
	for _, l := range strings.Split(help, "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// HelpCommands returns the commands a CLI's --help lists under
// "Commands:", each the leading lower-case words of its line ("topic
// create", "produce", "bench consume"); continuation lines name none.
func HelpCommands(help string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(l, "Commands:"):
			in = true
			continue
		case in && strings.TrimSpace(l) == "":
			return out
		case !in:
			continue
		}
		if cmd := CommandWords(strings.Fields(l)); cmd != "" && !slices.Contains(out, cmd) {
			out = append(out, cmd)
		}
	}
	return out
}

var commandWord = regexp.MustCompile(`^[a-z][a-z-]*$`)

// CommandWords joins the leading command words of a synopsis split into
// fields ("topic", "create" of "topic create NAME ..."): lower-case words
// before the first argument, flag or bracket.
func CommandWords(fields []string) string {
	var cmd []string
	for _, f := range fields {
		if !commandWord.MatchString(f) {
			break
		}
		cmd = append(cmd, f)
	}
	return strings.Join(cmd, " ")
}

// TableRow is one row of a markdown table: its cells, trimmed.
type TableRow []string

// SectionTable returns the body rows of the first table in the section
// of a markdown page that starts at the heading line title ("## CLI"),
// up to the next heading of any level; nil when there is none.
func SectionTable(page, title string) []TableRow {
	var rows []TableRow
	in, inTable := false, false
	for _, l := range strings.Split(page, "\n") {
		switch {
		case strings.TrimSpace(l) == title:
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(l, "#"):
			return rows
		}
		if !strings.HasPrefix(l, "|") {
			if inTable {
				return rows
			}
			continue
		}
		if !inTable {
			inTable = true // the header row
			continue
		}
		cells := splitRow(l)
		if len(cells) > 0 && strings.Trim(cells[0], "-: ") == "" {
			continue // the delimiter row
		}
		rows = append(rows, cells)
	}
	return rows
}

// splitRow splits a table row at the pipes that are not escaped (\|).
func splitRow(l string) TableRow {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(l, "|")
	l = strings.TrimSuffix(l, "|")
	var out TableRow
	var cell strings.Builder
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '\\' && i+1 < len(l) && l[i+1] == '|':
			cell.WriteByte('|')
			i++
		case l[i] == '|':
			out = append(out, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(l[i])
		}
	}
	return append(out, strings.TrimSpace(cell.String()))
}

var docFlag = regexp.MustCompile(`(?:^|[^a-zA-Z0-9-])--([a-z0-9][a-z0-9-]*)`)

// CellFlags returns the flags (--name, without dashes) a table cell names.
func CellFlags(cell string) []string {
	var out []string
	for _, m := range docFlag.FindAllStringSubmatch(cell, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}
