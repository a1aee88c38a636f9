package chaos

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// A held gate stops a connection's writes and reads until it is released;
// then what was queued goes through.
func TestIOGateHoldsAndReleases(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err == nil {
			got <- string(b)
		}
	}()
	g := &ioGate{}
	c, err := g.dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g.hold()
	wrote := make(chan error, 1)
	go func() { _, err := c.Write([]byte("hello")); wrote <- err }()
	select {
	case s := <-got:
		t.Fatalf("%q went through a held gate", s)
	case <-time.After(200 * time.Millisecond): // nothing may arrive meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.dial(ctx, ln.Addr().String()); err == nil {
		t.Error("a dial through a held gate did not wait")
	}
	g.release()
	select {
	case s := <-got:
		if s != "hello" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing arrived after the release")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
