package udaddy_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/udaddy"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestServerAndClient runs both sides against each other over a real-time link, four
// connections, and checks what each prints, as uudaddy prints it.
func TestServerAndClient(t *testing.T) {
	a, b := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	so, co := udaddy.Defaults(), udaddy.Defaults()
	so.Server, so.Addr, so.Connections, so.Listening = true, a.Device().IP(), 4, func() { close(listening) }
	co.Addr, co.Connections = a.Device().IP(), 4
	go func() { done <- udaddy.Run(ctx, a.Device(), so, &sout) }()
	<-listening
	if err := udaddy.Run(ctx, b.Device(), co, &cout); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	wantS := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	wantC := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout.String() != wantS || cout.String() != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout.String(), cout.String())
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
