package perftest

import (
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/emu/engine"
)

// A run refuses options out of range, or that do not go together, with one line naming the
// first of them.
func TestOptionsWorded(t *testing.T) {
	big := 8
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Server: true}, "perftest: no test chosen"},
		{Options{Test: Write, Server: true, Conn: engine.QPTypeUC}, "perftest: connection type UC: RC or UD"},
		{Options{Test: Write, Server: true, Conn: engine.QPTypeUD}, "perftest: UD connection only possible in SEND verb"},
		{Options{Test: Send, Server: true, Conn: engine.QPTypeUD, RDMACM: true}, "perftest: -R connects RC QPs here (UD through rdma_cm is not supported)"},
		{Options{Test: Read}, "perftest: a client needs a server to connect to"},
		{Options{Test: Read, Server: true, Port: 70000, Size: -1}, "perftest: port 70000 is out of range (1..65535)"},
		{Options{Test: Read, Server: true, Size: MaxSize + 1}, "perftest: size 8388609 is out of range (1..8388608)"},
		{Options{Test: Read, Server: true, Iters: 4}, "perftest: iterations 4 is out of range (5..100000000)"},
		{Options{Test: Read, Server: true, TxDepth: MaxTxDepth + 1}, "perftest: TX depth 15001 is out of range (1..15000)"},
		{Options{Test: Read, Server: true, RxDepth: -1}, "perftest: RX depth -1 is out of range (1..16384)"},
		{Options{Test: Read, Server: true, OutReads: 129}, "perftest: outstanding reads 129 is out of range (1..128)"},
		{Options{Test: Read, Server: true, RateLimit: -1}, "perftest: rate limit -1 is out of range (0..100000000)"},
		{Options{Test: Read, Server: true, RetryCount: &big}, "perftest: retry count 8 is out of range (0..7)"},
		{Options{Test: Read, Server: true, Wait: -time.Second}, "perftest: negative timeout"},
		{Options{Test: Read, Server: true, MTU: 1000}, "perftest: MTU 1000 is not one of 256, 512, 1024, 2048, 4096"},
		{Options{Test: Atomic, Server: true, Size: MaxSize + 1}, ""}, // atomic is always 8 bytes
	} {
		o := c.o
		o.defaults()
		if got := ctrltest.Text(o.check()); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
