package cmatose_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestServerAndClient runs both sides against each other over a real-time link, four
// connections, and checks what each prints, as ucmatose prints it.
func TestServerAndClient(t *testing.T) {
	so, co := cmatose.Defaults(), cmatose.Defaults()
	so.Connections, co.Connections = 4, 4
	sout, cout := ctrltest.ToolPair(t, cmatose.Run, so, co)
	wantS := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	wantC := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout != wantS || cout != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout, cout)
	}
}

func TestOptionsChecked(t *testing.T) {
	h, _ := loophosts.Pair(t, 0, 9)
	dev := h.Device()
	for _, o := range []cmatose.Options{
		{Addr: dev.IP(), Connections: cmatose.MaxConnections + 1},
		{Addr: dev.IP(), Count: -1, Size: 10},
		{Addr: dev.IP(), Size: cmatose.MaxSize + 1},
		{},
	} {
		if err := cmatose.Run(context.Background(), dev, o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "cmatose:") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
