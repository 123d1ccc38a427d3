package udaddy_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/compat/udaddy"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestServerAndClient runs both sides against each other over a real-time link, four
// connections, and checks what each prints, as uudaddy prints it.
func TestServerAndClient(t *testing.T) {
	so, co := udaddy.Defaults(), udaddy.Defaults()
	so.Connections, co.Connections = 4, 4
	sout, cout := ctrltest.ToolPair(t, udaddy.Run, so, co)
	wantS := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	wantC := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout != wantS || cout != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout, cout)
	}
}

func TestOptionsChecked(t *testing.T) {
	h, _ := loophosts.Pair(t, 0, 9)
	dev := h.Device()
	for _, o := range []udaddy.Options{
		{Addr: dev.IP(), Connections: udaddy.MaxConnections + 1},
		{Addr: dev.IP(), Count: -1, Size: 10},
		{Addr: dev.IP(), Count: 1, Size: 4097},
		{},
	} {
		if err := udaddy.Run(context.Background(), dev, o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "udaddy:") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
