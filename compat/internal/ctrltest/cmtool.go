package ctrltest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// ToolPair runs one of the rdma_cm tools (run: cmatose.Run or udaddy.Run) against itself on a
// pair of loopback hosts: a server with options so, and once it listens a client with co, each
// given the server's address. It returns what each printed; a run that fails fails the test.
func ToolPair(t *testing.T, run func(context.Context, *engine.Device, cmpeer.Options, io.Writer) error, so, co cmpeer.Options) (server, client string) {
	t.Helper()
	a, b := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	so.Server, so.Addr, so.Listening = true, a.Device().IP(), func() { close(listening) }
	co.Addr = a.Device().IP()
	s, c := Both(func(out io.Writer) (struct{}, error) { return struct{}{}, run(ctx, a.Device(), so, out) },
		func(out io.Writer) (struct{}, error) {
			select {
			case <-listening:
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			}
			return struct{}{}, run(ctx, b.Device(), co, out)
		})
	BothSucceeded(t, s, c)
	return s.Out.String(), c.Out.String()
}
