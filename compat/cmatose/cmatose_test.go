package cmatose_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestServerAndClient runs both sides against each other over a real-time link, four
// connections, and checks what each prints, as ucmatose prints it.
func TestServerAndClient(t *testing.T) {
	a, b := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	so, co := cmatose.Defaults(), cmatose.Defaults()
	so.Server, so.Addr, so.Connections, so.Listening = true, a.Device().IP(), 4, func() { close(listening) }
	co.Addr, co.Connections = a.Device().IP(), 4
	go func() { done <- cmatose.Run(ctx, a.Device(), so, &sout) }()
	<-listening
	if err := cmatose.Run(ctx, b.Device(), co, &cout); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	wantS := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	wantC := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout.String() != wantS || cout.String() != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout.String(), cout.String())
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
