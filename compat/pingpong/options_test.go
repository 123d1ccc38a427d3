package pingpong

import (
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/emu/engine"
)

// A run refuses options out of range with one line naming the first of them.
func TestOptionsWorded(t *testing.T) {
	big, neg := 32, -1
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Type: engine.QPType(9)}, "pingpong: transport " + engine.QPType(9).String() + " is not RC, UC or UD"},
		{Options{Port: 70000, Size: -1}, "pingpong: port 70000 is out of range (1..65535)"},
		{Options{Size: MaxSize + 1}, "pingpong: size 8388609 is out of range (1..8388608)"},
		{Options{Iters: -5}, "pingpong: iterations -5 is out of range (1..100000000)"},
		{Options{RxDepth: 1 << 20}, "pingpong: receive depth 1048576 is out of range (1..16384)"},
		{Options{QPTimeout: &big, RetryCount: &big}, "pingpong: QP timeout 32 is out of range (0..31)"},
		{Options{RetryCount: &neg}, "pingpong: retry count -1 is out of range (0..7)"},
		{Options{Idle: -time.Second}, "pingpong: negative timeout"},
		{Options{MTU: 1000}, "pingpong: MTU 1000 is not one of 256, 512, 1024, 2048, 4096"},
		{Options{}, "pingpong: a client needs a server to connect to"},
		{Options{Server: true}, ""},
	} {
		o := c.o
		o.defaults()
		if got := ctrltest.Text(o.check()); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
