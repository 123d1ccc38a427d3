package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/vfiouser"
)

// serve listens on its socket, prints the QEMU options, answers a vfio-user client as the
// softirdma function, and stops cleanly (socket gone, status 0) when its context ends.
func TestServe(t *testing.T) {
	for _, link := range []*linkFlags{nil, {link: "dgram:127.0.0.1:0,127.0.0.1:9", ip: "192.0.2.1", mac: "02:00:00:00:00:01"}} {
		name := "loopback"
		if link != nil {
			name = "dgram_link"
		}
		t.Run(name, func(t *testing.T) { testServe(t, link) })
	}
}

func testServe(t *testing.T, link *linkFlags) {
	sock := filepath.Join(t.TempDir(), "softirdma.sock")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, serveOptions{socket: sock, ip: netip.MustParseAddr("192.0.2.1"), mac: [6]byte{2, 0x53, 0x52, 0, 0, 1}, link: link}, &out, &errs)
	}()
	// Wait for the line serve prints once its socket listens.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "listening on") {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, errs.String())
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed nothing: %s", errs.String())
		}
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := vfiouser.NewClient(conn)
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 4)
	if err := c.RegionRead(vfiouser.PCIConfigRegion, 0, id); err != nil || id[0] != abi.PCIVendorID&0xff || id[2] != abi.PCIDeviceID&0xff {
		t.Fatalf("IDs % x %v", id, err)
	}
	c.Close()
	if !strings.Contains(out.String(), `"driver":"vfio-user-pci"`) || !strings.Contains(out.String(), sock) {
		t.Fatalf("no QEMU options printed: %s", out.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, errs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there: %v", err)
	}
}

func TestServeFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-socket", "x", "-ip", "nope"}, {"-socket", "x", "-mac", "zz"}, {"-socket", "x", "extra"},
		{"-socket", "x", "-link", "bogus"}, {"-socket", "x", "-link", "dgram:127.0.0.1:1"}, {"-socket", "x", "-loss", "0.9"}} {
		var out, errs bytes.Buffer
		if code := dispatch(append([]string{"serve"}, args...), &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("serve %v: exit %d, stderr %q", args, code, errs.String())
		}
	}
}
