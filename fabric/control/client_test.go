package control

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/internal/fakesock"
	"github.com/softirdma/softirdma/wire/faultplan"
)

// A Client adds, lists and removes faults and reads the ports; a refusal is an *AnswerError
// with the socket's reason.
func TestClient(t *testing.T) {
	fab, _ := fabricWithAQueuedFrame(t)
	_, ctl := serving(t, fab, io.Discard)
	c := Client{Path: ctl}
	f, _ := faultplan.Parse("drop from=a opcode=RDMA_WRITE_ONLY nth=3")
	if id, err := c.Add(f); id != 1 || err != nil {
		t.Fatalf("Add: %d %v", id, err)
	}
	var list, ports strings.Builder
	if err := c.List(&list); err != nil || list.String() != "1 fired=0 seen=0 frames=none drop from=a opcode=RC_RDMA_WRITE_ONLY nth=3\n" {
		t.Fatalf("List: %q %v", list.String(), err)
	}
	if err := c.Ports(&ports); err != nil || !strings.HasPrefix(ports.String(), "port a in_frames=1 ") || strings.Count(ports.String(), "\n") != 2 {
		t.Fatalf("Ports: %q %v", ports.String(), err)
	}
	if err := c.Remove(1); err != nil {
		t.Fatal(err)
	}
	var ae *AnswerError
	if err := c.Remove(1); !errors.As(err, &ae) || ae.Why != "no fault 1" {
		t.Fatalf("Remove again: %v", err)
	}
	f, _ = faultplan.Parse("drop from=c")
	if _, err := c.Add(f); !errors.As(err, &ae) || ae.Why != "from=c: the fabric has a, b" {
		t.Fatalf("Add from=c: %v", err)
	}
}

// What is not a control socket, or stops answering, is an error that says which.
func TestClientErrors(t *testing.T) {
	dir := t.TempDir()
	serve := func(name, answer string, hangUp bool) string {
		return fakesock.Listen(t, filepath.Join(dir, name), answer, hangUp)
	}
	const timeout = 300 * time.Millisecond
	for _, c := range []struct {
		path, want string
		is         func(error) bool
	}{
		{filepath.Join(dir, "none.sock"), "none.sock: dial unix " + filepath.Join(dir, "none.sock") + ": connect: no such file or directory",
			func(err error) bool { var e *ConnError; return errors.As(err, &e) && errors.Is(err, os.ErrNotExist) }},
		{serve("silent.sock", "", false), "silent.sock is not a softirdma control socket (it answered nothing within 300ms: a function's vfio-user socket?)",
			func(err error) bool { var e *NotControlError; return errors.As(err, &e) }},
		{serve("cut.sock", "1 fired=0 seen=0 frames=none drop\n", false), "the answer did not end within 300ms",
			func(err error) bool { var e *CutError; return errors.As(err, &e) && e.Timeout == timeout }},
		{serve("gone.sock", "1 fired=0 seen=0 frames=none drop\n", true), "the connection ended before the answer did (<nil>)",
			func(err error) bool { var e *CutError; return errors.As(err, &e) && e.Timeout == 0 }},
	} {
		err := Client{Path: c.path, Timeout: timeout}.List(io.Discard)
		if err == nil || !strings.HasSuffix(err.Error(), c.want) || !c.is(err) {
			t.Errorf("%s: %v, want ...%q", c.path, err, c.want)
		}
	}
}
