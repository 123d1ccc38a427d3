package rping

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestRping runs softirdma's rping against itself over real sockets: ten pings, verbose and
// validated, then the client disconnects and both end.
func TestRping(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, c := ctrltest.Both(func(out io.Writer) (Result, error) {
		return Run(ctx, hs.Device(), Options{Options: cmpeer.Options{Server: true, Addr: hs.Device().IP(), Count: 10}, Verbose: true}, out)
	}, func(out io.Writer) (Result, error) {
		return Run(ctx, hc.Device(), Options{Options: cmpeer.Options{Addr: hs.Device().IP(), Count: 10}, Verbose: true, Validate: true}, out)
	})
	ctrltest.BothSucceeded(t, s, c)
	sres, cres, sout, cout := s.Res, c.Res, &s.Out, &c.Out
	if sres.Pings != 10 || cres.Pings != 10 {
		t.Fatalf("pings: server %d, client %d", sres.Pings, cres.Pings)
	}
	// 64 bytes: the 13 of "rdma-ping-0: ", 50 letters from 'A' on, and the 0.
	want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	lines := strings.Split(strings.TrimSpace(cout.String()), "\n")
	if len(lines) != 10 || lines[0] != want || lines[9] != "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA" {
		t.Fatalf("client output:\n%s", cout.String())
	}
	if !strings.HasPrefix(sout.String(), "server "+want) {
		t.Fatalf("server output:\n%s", sout.String())
	}
}

// A client aimed at its own device's address is told so at once, not rejected by its own
// loopback with "INVALID_SERVICE_ID".
func TestClientOwnAddress(t *testing.T) {
	_, hc := loophosts.Pair(t, 0, 9)
	_, err := Run(context.Background(), hc.Device(), Options{Options: cmpeer.Options{Addr: hc.Device().IP(), Timeout: 5 * time.Second}}, &bytes.Buffer{})
	want := "rping: 192.0.2.2 is this device's own address: a client connects to a server elsewhere on the link (the server's -ip), not to itself"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
