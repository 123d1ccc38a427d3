package ctrl_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/compat/perftest"
	"github.com/softirdma/softirdma/compat/pingpong"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// clients runs perftest's (a WRITE test) and pingpong's clients on a loopback device, to a
// server at 127.0.0.1, what they print discarded.
type clients struct{ dev *engine.Device }

func newClients(t *testing.T) clients {
	_, hc := loophosts.Pair(t, 0, 1)
	return clients{hc.Device()}
}

func (c clients) perftest(o perftest.Options) error {
	o.Test, o.Host = perftest.Write, "127.0.0.1"
	_, err := perftest.Run(context.Background(), c.dev, o, &bytes.Buffer{})
	return err
}

func (c clients) pingpong(o pingpong.Options) error {
	o.Host = "127.0.0.1"
	_, err := pingpong.Run(context.Background(), c.dev, o, &bytes.Buffer{})
	return err
}

// TestBadOptions: out-of-range options, and for perftest sizes a peer could not have meant, are
// refused before anything is allocated.
func TestBadOptions(t *testing.T) {
	c := newClients(t)
	big := 32
	ctrltest.RefusedAtOnce(t, "perftest: ", []perftest.Options{{Size: -1}, {Size: 99999999999}, {Iters: -5}, {Iters: 4}, {Port: 70000}, {TxDepth: -1}, {TxDepth: 1 << 20},
		{RxDepth: 1 << 20}, {OutReads: 1000}, {MTU: 1000}, {QPTimeout: &big}, {RetryCount: &big}, {Wait: -time.Second}}, c.perftest)
	ctrltest.RefusedAtOnce(t, "pingpong: ", []pingpong.Options{{Size: -1}, {Size: 99999999999}, {Iters: -5}, {Port: 70000}, {RxDepth: -1}, {RxDepth: 1 << 20},
		{MTU: 1000}, {QPTimeout: &big}, {RetryCount: &big}, {Wait: -time.Second}}, c.pingpong)
}

// TestClientBadServer: a server that accepts and then says nothing (not the tool's peer, or
// hung) ends the client after its timeout, one that answers with something else at once, each
// with a line that says what the server did (not a socket's "i/o timeout") and, for a wrong
// answer, what to check.
func TestClientBadServer(t *testing.T) {
	c := newClients(t)
	ctrltest.BadServers(t, map[string]string{
		"":                        "perftest: exchanging versions: the peer sent nothing for 200ms",
		"SSH-2.0-OpenSSH_9.2\r\n": `perftest: the peer sent "SSH-2.0-OpenSSH_", not a perftest version (is the server ib_*_bw or softirdma perf, and -p its port?)`,
	}, func(port int) error {
		return c.perftest(perftest.Options{Port: port, GID: c.dev.IP(), Timeout: 200 * time.Millisecond})
	})
	ctrltest.BadServers(t, map[string]string{
		"": "pingpong: couldn't read remote address: the peer sent nothing for 200ms",
		"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n": `pingpong: the server sent "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent", ` +
			"not an ibv_rc_pingpong address (is it ibv_rc_pingpong or softirdma pingpong, and -p its port?)",
	}, func(port int) error {
		return c.pingpong(pingpong.Options{Port: port, GID: c.dev.IP(), Timeout: 200 * time.Millisecond})
	})
}
