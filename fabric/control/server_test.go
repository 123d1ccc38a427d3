package control

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
)

var (
	faultLine = regexp.MustCompile(`^[1-9][0-9]* fired=[0-9]+ seen=[0-9]+ \S`)
	portLine  = regexp.MustCompile(`^port [a-z]+ in_frames=[0-9]+ in_bytes=[0-9]+ out_frames=[0-9]+ out_bytes=[0-9]+ dropped=[0-9]+ queued=[0-9]+$`)
	addedLine = regexp.MustCompile(`^ok [1-9][0-9]*$`)
)

// fabricWithAQueuedFrame is a fabric with ports a and b, a's one frame (a 60-byte broadcast)
// queued for b's reader: ports then has counts to print on both sides.
func fabricWithAQueuedFrame(tb testing.TB) (*fabric.Fabric, *ethswitch.Port) {
	tb.Helper()
	fab, err := fabric.New(fabric.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	var p [2]*ethswitch.Port
	for i, name := range []string{"a", "b"} {
		if p[i], err = fab.AddPort(name, 0); err != nil {
			tb.Fatal(err)
		}
	}
	broadcast := append(bytes.Repeat([]byte{0xff}, 6), make([]byte, 54)...)
	if _, err := p[0].SendBatch([][]byte{broadcast}); err != nil {
		tb.Fatal(err)
	}
	return fab, p[1]
}

// serving is a control socket at a fresh path for fab's senders a and b, logging to log and
// served until the test ends; it returns the server and its path.
func serving(t *testing.T, fab *fabric.Fabric, log io.Writer) (*Server, string) {
	t.Helper()
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	s, err := Listen(ctl, fab, []string{"a", "b"}, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	go s.Serve()
	return s, ctl
}

// FuzzControlCommand: whatever line a peer of the owner sends, the control socket answers it
// and ends with exactly one "ok" or "error" line; an error is the whole answer and changes no
// fault; only "ok" to add or remove changes the plan, by one; a listing's lines are well formed.
func FuzzControlCommand(f *testing.F) {
	for _, s := range []string{"list", "ports", "add drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3",
		"add corrupt from=b nth=2", "add flap from=a for=2s", "add delay from=a delay=5ms",
		"add duplicate from=b qp=0x11 psn=7 count=2 name=dup", "remove 1", "remove -1",
		"remove 99999999999999999999", "list extra", "ports x", "add", "add drop from=c", "", "\x00\xff", "add drop nth=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsRune(line, '\n') {
			return // the socket reads lines: a newline splits a command in two
		}
		fab, _ := fabricWithAQueuedFrame(t)
		fab.AddFault(faultplan.Fault{Src: "a", Nth: 1}) // fault 1, so that remove and list have something
		c := &Server{fab: fab, senders: []string{"a", "b"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		before := len(fab.Faults())
		var out bytes.Buffer
		cmd := strings.TrimSpace(line)
		c.command(&out, cmd)
		answer := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if !strings.HasSuffix(out.String(), "\n") {
			t.Fatalf("%q: answer %q does not end its last line", line, out.String())
		}
		last, listing := answer[len(answer)-1], answer[:len(answer)-1]
		after := len(fab.Faults())
		switch {
		case strings.HasPrefix(last, "error "):
			if len(listing) != 0 || after != before {
				t.Fatalf("%q: an error after %d lines, faults %d -> %d: %q", line, len(listing), before, after, out.String())
			}
		case last == "ok":
			verb, _, _ := strings.Cut(cmd, " ")
			want := before
			if verb == "remove" {
				want--
			}
			if after != want {
				t.Fatalf("%q: faults %d -> %d", line, before, after)
			}
			for _, l := range listing {
				if !faultLine.MatchString(l) && !portLine.MatchString(l) {
					t.Fatalf("%q: listing line %q", line, l)
				}
			}
		case addedLine.MatchString(last):
			if len(listing) != 0 || after != before+1 {
				t.Fatalf("%q: added, faults %d -> %d: %q", line, before, after, out.String())
			}
		default:
			t.Fatalf("%q: answer ends %q", line, last)
		}
	})
}

// The control socket answers whatever a peer writes with an error line and stays up; a line
// longer than a command may be ends that connection with one; a peer of another user (here:
// the socket's owner made someone else) is refused by its credentials.
func TestControlSocketInput(t *testing.T) {
	var logBuf lockedbuf.Buffer
	fab, pb := fabricWithAQueuedFrame(t)
	c, ctl := serving(t, fab, &logBuf)
	talk := func(input string) string {
		t.Helper()
		conn, err := net.Dial("unix", ctl)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		// The socket may answer and hang up before it read everything (a line too long):
		// what it said is what counts.
		_, _ = io.WriteString(conn, input)
		_ = conn.(*net.UnixConn).CloseWrite()
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	got := talk("hello\nadd\nadd drop nth=0\nremove\nlist extra\n\x00\xff\nadd drop from=a\nlist\nports x\nports\n")
	want := []string{`error unknown command "hello"`, "error empty fault", "error nth=0: a count is 1", "error remove takes a fault's number",
		"error list takes nothing", "error unknown command", "ok 1", "1 fired=0 seen=0 frames=none drop from=a", "ok", "error ports takes nothing",
		"port a in_frames=1 in_bytes=60 out_frames=0 out_bytes=0 dropped=0 queued=0",
		"port b in_frames=0 in_bytes=0 out_frames=0 out_bytes=0 dropped=0 queued=1", "ok"}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != len(want) {
		t.Fatalf("answers %q", got)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("answer %d: %q, want %q...", i, lines[i], w)
		}
	}
	if got := talk(strings.Repeat("x", MaxLine+10) + "\n"); !strings.Contains(got, "error a command is one line of at most") {
		t.Fatalf("a long line: %q", got)
	}
	c.owner.Store(int64(os.Geteuid()) + 1)
	if got := talk("list\n"); !strings.HasPrefix(got, "error refused: the control socket is its owner's") {
		t.Fatalf("another user's peer: %q", got)
	}
	if !strings.Contains(logBuf.String(), "control: peer refused") {
		t.Fatalf("the refusal was not logged: %s", logBuf.String())
	}
	if len(fab.Faults()) != 1 {
		t.Fatalf("the plan holds %v", fab.Faults())
	}
	if pb.Queued() != 1 {
		t.Fatalf("the control socket changed the ports: b holds %d frames", pb.Queued())
	}
}

// A second control socket on a path one listens on is refused with ErrInUse, and leaves the
// first one answering.
func TestListenRefusesASocketInUse(t *testing.T) {
	fab, _ := fabricWithAQueuedFrame(t)
	_, ctl := serving(t, fab, io.Discard)
	if _, err := Listen(ctl, fab, nil, nil); err == nil || err.Error() != ctl+": another process listens on it" {
		t.Fatalf("a second Listen: %v", err)
	}
	if err := (Client{Path: ctl}).List(io.Discard); err != nil {
		t.Fatalf("the first socket after a second Listen: %v", err)
	}
}
