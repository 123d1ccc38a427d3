package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/fabric/control"
	"github.com/softirdma/softirdma/internal/fakesock"
	"golang.org/x/sys/unix"
)

// startControl is a control socket on a fabric of a and b, with no fault yet, until the test ends.
func startControl(t *testing.T) string {
	t.Helper()
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fab, err := fabric.New(fabric.Config{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := control.Listen(ctl, fab, []string{"a", "b"}, log)
	if err != nil {
		t.Fatal(err)
	}
	go c.Serve()
	t.Cleanup(func() { c.Close() })
	return ctl
}

// fault's flags may come after its verb, as decode's after its file; remove says what it did.
func TestFaultFlagsAfterVerb(t *testing.T) {
	ctl := startControl(t)
	for _, c := range []struct {
		args    []string
		out     string
		errText string
		code    int
	}{
		{[]string{"fault", "add", "drop", "from=a", "nth=3", "-socket", ctl}, "fault 1 added\n", "", 0},
		{[]string{"fault", "list", "-socket", ctl}, "1 fired=0 seen=0 frames=none drop from=a nth=3\n", "", 0},
		{[]string{"fault", "-timeout", "5s", "list", "-socket", ctl}, "1 fired=0 seen=0 frames=none drop from=a nth=3\n", "", 0},
		{[]string{"fault", "remove", "-socket", ctl, "1"}, "fault 1 removed\n", "", 0},
		{[]string{"fault", "-socket", ctl, "list"}, "", "", 0},
		{[]string{"fault", "add", "drop", "-socket", ctl, "from=b"}, "fault 2 added\n", "", 0},
		{[]string{"fault", "-socket", ctl, "remove", "2"}, "fault 2 removed\n", "", 0},
		{[]string{"fault", "list", "-socket", ctl, "-bogus"}, "", "flag provided but not defined: -bogus\nRun 'softirdma fault -h' for its flags.\n", 2},
		{[]string{"fault", "list", "-socket"}, "", "flag needs an argument: -socket\nRun 'softirdma fault -h' for its flags.\n", 2},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != c.code || out != c.out || errOut != c.errText {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q and %q", c.args, code, out, errOut, c.code, c.out, c.errText)
		}
	}
}

// A -socket that is not serve's control socket is named for what it is; a server that answers
// otherwise, or not at all, is told apart from serve within a short wait, not -timeout's.
func TestFaultSocketNotControl(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A socket nobody listens on any more: its listener closed without removing it.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	dgram := filepath.Join(dir, "dgram.sock")
	dc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	silent := fakesock.Listen(t, filepath.Join(dir, "silent.sock"), "", false)
	chatty := fakesock.Listen(t, filepath.Join(dir, "ssh.sock"), "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", false)
	hangup := fakesock.Listen(t, filepath.Join(dir, "hangup.sock"), "", true)
	notCtl := " is not a softirdma control socket ("
	for _, c := range []struct {
		socket, want string
		code         int
	}{
		{filepath.Join(dir, "none.sock"), "-socket " + dir + "/none.sock does not exist: is serve running with -control " + dir + "/none.sock?", 1},
		{dir, "-socket " + dir + " is a directory, not serve's control socket (serve -control PATH)", 2},
		{file, "-socket " + file + " is a regular file, not serve's control socket (serve -control PATH)", 2},
		{fifo, "-socket " + fifo + " is a named pipe, not serve's control socket (serve -control PATH)", 2},
		{stale, "-socket " + stale + " is a socket nobody listens on: has serve stopped?", 1},
		{dgram, dgram + notCtl + "a datagram socket)", 1},
		{silent, silent + notCtl + "it answered nothing within 2s: a function's vfio-user socket?)", 1},
		{chatty, chatty + notCtl + `it answered "SSH-2.0-OpenSSH_9.2p1 Debian-2")`, 1},
		{hangup, hangup + notCtl + "it closed the connection without answering)", 1},
	} {
		start := time.Now()
		code, out, errOut := runCLI("fault", "-socket", c.socket, "list")
		if want := "softirdma fault: " + c.want + "\n"; code != c.code || out != "" || errOut != want {
			t.Errorf("-socket %s: exit %d, stdout %q, stderr %q; want %d and %q", c.socket, code, out, errOut, c.code, want)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("-socket %s took %v", c.socket, d)
		}
	}
}
