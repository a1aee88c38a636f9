package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
)

// Issue 28: a malformed --brokers address fails every command at once,
// naming the flag, the address and the form wanted, before any broker is
// dialed (there is nothing to dial: the error comes from the client's
// constructor).
func TestBrokersFlagRefusesAMalformedAddress(t *testing.T) {
	for _, args := range [][]string{
		{"topic", "list"},
		{"cluster", "status"},
		{"produce", "m"},
		{"consume", "m", "--partition", "0"},
		{"group", "list"},
		{"txn", "list"},
	} {
		_, _, err := runWithStdin(t, "x\n", append([]string{"--brokers", "127.0.0.1:9400, nonsense:xx"}, args...)...)
		var bad *client.BrokerAddrError
		if !errors.As(err, &bad) || bad.Addr != "nonsense:xx" {
			t.Errorf("%v: %v, want a *client.BrokerAddrError for nonsense:xx", args, err)
			continue
		}
		want := `--brokers: bad broker address "nonsense:xx": port "xx" is not a number from 1 to 65535 (want host:port with a port from 1 to 65535, e.g. 127.0.0.1:9400)`
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %q, want it to say %q", args, err, want)
		}
	}
}

// Issue 28: with every --brokers address refusing connections, commands
// end with the one line naming the addresses; produce too, whose records
// would otherwise wait for metadata until their max block.
func TestNoBrokerReachableWhenEveryAddressRefuses(t *testing.T) {
	a, b := nodetest.FreeAddr(t), nodetest.FreeAddr(t) // free ports: nothing listens
	want := "no broker reachable at " + a + "," + b + " (is sluiced running?)"
	for _, args := range [][]string{
		{"topic", "list"},
		{"produce", "m"},
		{"group", "describe", "g"},
	} {
		_, _, err := runWithStdin(t, "x\n", append([]string{"--brokers", a + "," + b}, args...)...)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "max block") {
			t.Errorf("%v: %v, want it to say %q", args, err, want)
		}
	}
}
