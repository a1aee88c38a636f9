package kafka

// ParseRequestFrame parses a request frame (header and body, without
// the 4-byte size) as a connection does. kip511 reports an ApiVersions of
// a version the door does not serve, which it answers (in v0) rather than
// closing; err is what closes the connection otherwise.
func ParseRequestFrame(b []byte) (kip511 bool, err error) {
	r, err := parseRequest(b)
	if err != nil && r != nil && r.key == apiVersionsKey {
		return true, nil
	}
	return false, err
}
