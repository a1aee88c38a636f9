package group

import (
	"reflect"
	"regexp"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is KIP-848's regular-expression subscription
// (ConsumerGroupHeartbeat v1's subscribed_topic_regex; docs/design.md
// decision 73). A member subscribes to the union of the topic names it
// gave and the topics its regex matches that it may DESCRIBE. The group
// compiles each distinct regex once and keeps what it matched against
// the last topic metadata it saw (groupRegex); every member with that
// regex filters the matches through its own TopicFilter. A change of a
// member's resolved topics is a change of its subscription: the group
// epoch bumps and the target is computed again.

// MaxRegexBytes bounds a member's regex (Kafka sets none). A regex is
// matched against every topic name whenever topics are created or
// deleted, at a cost that grows with its length; a longer one is
// INVALID_REGULAR_EXPRESSION.
const MaxRegexBytes = 1000

// TopicFilter reports whether a member may see a topic: the door's
// DESCRIBE check on the topic for the caller of the member's last
// heartbeat (Kafka 4's KAFKA-18813). nil allows every topic (no
// authorizer). The group keeps it until the member's next heartbeat and
// calls it whenever the member's regex is resolved again — on a later
// heartbeat or a metadata change (MetadataChanged) — with the group's
// owner serialising the call; it must not block and must not call the
// group.
type TopicFilter func(topic string) bool

// groupRegex is one distinct regex of the group's members.
type groupRegex struct {
	re *regexp.Regexp
	// members counts the members subscribed with it; the entry goes with
	// the last of them.
	members int
	// from is the topics map matches were computed from (held, so that
	// its identity cannot be reused by another map); nil before the
	// first resolution.
	from map[string]TopicMetadata
	// matches: the topic names the regex matches in from, sorted.
	matches []string
}

// compileRegex compiles a member's regex as Kafka matches it: against
// the whole topic name (RE2/J's matches(); Go's regexp is RE2). An
// invalid or too long regex is INVALID_REGULAR_EXPRESSION.
func compileRegex(s string) (*regexp.Regexp, error) {
	invalid := func(format string, args ...any) error {
		return errs.New(sluicev1.ErrorCode_INVALID_REGULAR_EXPRESSION, format, args...)
	}
	switch {
	case len(s) > MaxRegexBytes:
		return nil, invalid("the regular expression is %d bytes long; at most %d", len(s), MaxRegexBytes)
	case !utf8.ValidString(s):
		return nil, invalid("the regular expression is not valid UTF-8")
	}
	// \A and \z anchor the whole name whatever flags s sets ((?m) changes
	// ^ and $, not these).
	re, err := regexp.Compile(`\A(?:` + s + `)\z`)
	if err != nil {
		if _, err2 := regexp.Compile(s); err2 != nil {
			err = err2 // the message about s itself, not the wrapped form
		}
		return nil, invalid("invalid regular expression %q: %v", errs.Echo(s), err)
	}
	return re, nil
}

// checkRegex validates req's regex before the heartbeat changes
// anything, and returns it compiled when the group does not have it yet
// (nil otherwise).
func (g *Group) checkRegex(req HeartbeatRequest) (*regexp.Regexp, error) {
	s := req.SubscribedTopicRegex
	if s == nil || *s == "" {
		return nil, nil
	}
	if _, ok := g.regexes[*s]; ok {
		return nil, nil
	}
	return compileRegex(*s)
}

// setRegex changes m's regex to s ("" none); re is s compiled when the
// group does not hold it yet. m's resolved topics are those of the old
// regex until filterRegex runs.
func (g *Group) setRegex(m *member, s string, re *regexp.Regexp, topics map[string]TopicMetadata) {
	g.dropRegex(m)
	m.regex = s
	if s == "" {
		m.regexTopics = nil
		return
	}
	r := g.regexes[s]
	if r == nil {
		if re == nil {
			var err error
			if re, err = compileRegex(s); err != nil {
				// Only Restore gets here (a logged regex this build no
				// longer compiles): the member keeps the topics it had.
				return
			}
		}
		r = &groupRegex{re: re}
		g.regexes[s] = r
		r.resolve(topics, true)
	}
	r.members++
}

// dropRegex takes m's regex out of the group's count.
func (g *Group) dropRegex(m *member) {
	if m.regex == "" {
		return
	}
	if r := g.regexes[m.regex]; r != nil {
		if r.members--; r.members <= 0 {
			delete(g.regexes, m.regex)
		}
	}
}

// resolve matches r against topics when they are not the map it last
// matched (or force), and reports whether the matches changed.
func (r *groupRegex) resolve(topics map[string]TopicMetadata, force bool) bool {
	if !force && r.from != nil && sameMap(r.from, topics) {
		return false
	}
	r.from = topics
	var matches []string
	for t := range topics {
		if r.re.MatchString(t) {
			matches = append(matches, t)
		}
	}
	sort.Strings(matches)
	if slices.Equal(matches, r.matches) {
		return false
	}
	r.matches = matches
	return true
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap(a, b map[string]TopicMetadata) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// refreshRegexes resolves the group's regexes again against topics —
// those not resolved against this very map yet, or all with force — and
// filters the matches again for the members of each regex whose matches
// changed. It reports whether a member's subscription changed.
func (g *Group) refreshRegexes(now time.Time, topics map[string]TopicMetadata, force bool) bool {
	var changed map[string]bool
	for s, r := range g.regexes {
		if r.resolve(topics, force) {
			if changed == nil {
				changed = map[string]bool{}
			}
			changed[s] = true
		}
	}
	if changed == nil {
		return false
	}
	moved := false
	for _, id := range g.memberIDs() {
		m := g.members[id]
		if changed[m.regex] {
			g.filterRegex(now, m)
			moved = g.setSubscription(m) || moved
		}
	}
	return moved
}

// filterRegex sets m's resolved topics: its regex's matches that its
// filter allows. A member restored from the log whose filter is not
// known yet (no heartbeat since) only loses the topics that no longer
// match: a topic is added only through its own caller's DESCRIBE check.
func (g *Group) filterRegex(now time.Time, m *member) {
	r := g.regexes[m.regex]
	if r == nil {
		return
	}
	if !m.filterKnown {
		var kept []string
		for _, t := range m.regexTopics {
			if _, ok := slices.BinarySearch(r.matches, t); ok {
				kept = append(kept, t)
			}
		}
		m.regexTopics = kept
		return
	}
	out := make([]string, 0, len(r.matches))
	for _, t := range r.matches {
		if m.filter == nil || m.filter(t) {
			out = append(out, t)
		}
	}
	m.regexTopics = out
	m.regexFilteredAt = now
}

// setSubscription sets m's subscribed topics to the union of its names
// and its resolved topics, and reports whether they changed.
func (g *Group) setSubscription(m *member) bool {
	union := m.names
	if len(m.regexTopics) > 0 {
		union = sortedUnique(append(append([]string(nil), m.names...), m.regexTopics...))
	}
	if equalStrings(union, m.topics) {
		return false
	}
	g.subscribe(m.topics, union)
	m.topics = union
	return true
}

// applyRegex applies a heartbeat's regex and filter to m and reports
// whether its subscription changed (with its names, already set).
func (g *Group) applyRegex(now time.Time, m *member, req HeartbeatRequest, topics map[string]TopicMetadata) bool {
	refilter := false
	if s := req.SubscribedTopicRegex; s != nil && *s != m.regex {
		g.setRegex(m, *s, req.compiled, topics)
		refilter = true
	}
	if m.regex != "" && (!m.filterKnown || now.Sub(m.regexFilteredAt) >= g.cfg.RegexRefreshInterval) {
		// A restored member's first filter, or the periodic check that
		// picks up ACL changes (Kafka's regex refresh interval).
		refilter = true
	}
	m.filter, m.filterKnown = req.TopicFilter, true
	moved := g.refreshRegexes(now, topics, false)
	if refilter {
		g.filterRegex(now, m)
	}
	return g.setSubscription(m) || moved
}
