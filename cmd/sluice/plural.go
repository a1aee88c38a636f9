package main

import (
	"strconv"
	"strings"
)

// plural returns n and the noun, singular when n is 1 or -1 and plural
// otherwise: plural(1, "partition") is "1 partition", plural(0,
// "partition") "0 partitions". noun is the singular, and may be several
// words of which the last is counted ("hanging transaction"). The plural
// adds "es" after s, x, z, ch and sh ("batch" → "batches") and "s"
// otherwise; a noun outside that rule needs its own wording.
func plural[N ~int | ~int32 | ~int64](n N, noun string) string {
	s := strconv.FormatInt(int64(n), 10) + " " + noun
	if n == 1 || n == -1 {
		return s
	}
	for _, end := range []string{"s", "x", "z", "ch", "sh"} {
		if strings.HasSuffix(noun, end) {
			return s + "es"
		}
	}
	return s + "s"
}
