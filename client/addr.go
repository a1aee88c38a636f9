package client

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// BrokerAddrError is a broker address that is not host:port with a port
// from 1 to 65535. New refuses such a bootstrap address, and the client
// never dials one (a broker that advertises one is skipped): no amount
// of retrying would reach it.
type BrokerAddrError struct {
	Addr   string // the address as given
	Reason string // what is wrong with it
}

func (e *BrokerAddrError) Error() string {
	return fmt.Sprintf("bad broker address %q: %s (want host:port with a port from 1 to 65535, e.g. 127.0.0.1:9400)", e.Addr, e.Reason)
}

// checkBrokerAddr returns a *BrokerAddrError unless addr is host:port: a
// non-empty host (a name, an IPv4 address or a bracketed IPv6 address)
// without spaces or slashes, and a decimal port from 1 to 65535. It looks
// nothing up: a name that does not resolve is the dial's failure.
func checkBrokerAddr(addr string) error {
	bad := func(format string, args ...any) error {
		return &BrokerAddrError{Addr: addr, Reason: fmt.Sprintf(format, args...)}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// SplitHostPort's *net.AddrError: its Err ("missing port in
		// address", "too many colons in address") without the address.
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return bad("%s", ae.Err)
		}
		return bad("%v", err)
	}
	switch {
	case host == "":
		return bad("no host")
	case strings.ContainsAny(host, " \t\r\n/"):
		return bad("host %q has a space or a slash", host)
	}
	// ParseUint, not Atoi: no sign, no spaces.
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return bad("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
