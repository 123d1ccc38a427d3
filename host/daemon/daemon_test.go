package daemon

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/host/nldev"
	"github.com/softirdma/softirdma/host/ucontext"
	"github.com/softirdma/softirdma/host/uverbs"
)

// TestPreloadHeaderAgrees: the C side of the protocol has the numbers this package has.
func TestPreloadHeaderAgrees(t *testing.T) {
	h, err := os.ReadFile("../preload/preload.h")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint64{"SIRD_MAGIC": Magic, "SIRD_VERSION": Version, "SIRD_NL_CONTROL": nlControl,
		"SIRD_NL_CAP_ACK": nlCapAck, "SIRD_MAX_MSG": MaxMessage, "SIRD_MAX_FDS": MaxFiles, "SIRD_UVERBS_MEMLOCK": UverbsMemlock, "SIRD_ANSWER_SERVE_MEMORY": AnswerServeMemory} {
		m := regexp.MustCompile(`#define ` + name + `\s+(0x[0-9a-f]+|[0-9]+)u?`).FindSubmatch(h)
		if m == nil {
			t.Errorf("preload.h defines no %s", name)
			continue
		}
		got, err := strconv.ParseUint(string(m[1]), 0, 64)
		if err != nil || got != want {
			t.Errorf("preload.h: %s is %s, the daemon's %d", name, m[1], want)
		}
	}
	for kind, want := range map[string]int{"SIRD_UVERBS": KindUverbs, "SIRD_NETLINK": KindNetlink, "SIRD_RDMACM": KindRdmaCM,
		"SIRD_CAPTURE": KindCapture, "SIRD_ATTACH": KindAttach, "SIRD_MEMORY": KindMemory, "SIRD_NETLINK_KERNEL": KindNetlinkKernel, "SIRD_MEM_READ": memRead, "SIRD_MEM_WRITE": memWrite} {
		if !regexp.MustCompile(kind + ` = ` + strconv.Itoa(want) + `,`).Match(h) {
			t.Errorf("preload.h: %s is not %d", kind, want)
		}
	}
}

type nowhere struct{}

func (nowhere) Send([]byte) error { return nil }

func startDaemon(t *testing.T) string {
	t.Helper()
	e := engine.NewDevice(engine.DeviceConfig{Name: "rxe0", Clock: realtime.NewWallClock(), IP: netip.MustParseAddr("127.0.0.1")})
	e.Attach(nowhere{})
	t.Cleanup(e.Stop)
	sock := filepath.Join(t.TempDir(), "sock")
	d, err := Listen(Config{Socket: sock, Devices: []*ucontext.Device{{Engine: e, GIDs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}},
		Netlink: &nldev.Table{Devices: []nldev.Device{{Index: 1, Name: "rxe0", Ports: []nldev.Port{{}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(context.Background()) }()
	t.Cleanup(func() {
		d.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

func dial(t *testing.T, sock string, kind, arg uint32) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(Hello(kind, arg)); err != nil {
		t.Fatal(err)
	}
	return c
}

// recv reads one message and the fds it carries.
func recv(t *testing.T, c *net.UnixConn) ([]byte, []int) {
	t.Helper()
	b, oob := make([]byte, MaxMessage), make([]byte, unix.CmsgSpace(4*MaxFiles))
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		f, _ := unix.ParseUnixRights(&m)
		fds = append(fds, f...)
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return b[:n], fds
}

// TestUverbsConnection: a uverbs hello gets the command file; GET_CONTEXT comes back as the
// write of the async event file's number at the response address, the file as SCM_RIGHTS.
func TestUverbsConnection(t *testing.T) {
	c := dial(t, startDaemon(t), KindUverbs, 0)
	hello, fds := recv(t, c)
	if binary.LittleEndian.Uint32(hello) != 0 || len(fds) != 1 {
		t.Fatalf("hello answer %x with %d files, want 0 and the command file", hello, len(fds))
	}
	var st unix.Stat_t
	if unix.Fstat(fds[0], &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("the command file is not a memfd (mode %o)", st.Mode)
	}
	cmd := []byte{uverbs.CmdGetContext, 0, 0, 0, 4, 0, 2, 0, 0, 0x10, 0, 0, 0, 0, 0, 0}
	if _, err := c.Write(cmd); err != nil {
		t.Fatal(err)
	}
	reply, fds := recv(t, c)
	le := binary.LittleEndian
	if ret, nw, nf := int32(le.Uint32(reply)), le.Uint16(reply[4:]), le.Uint16(reply[6:]); ret != 16 || nf != 1 || len(fds) != 1 || nw < 2 {
		t.Fatalf("GET_CONTEXT reply: ret %d, %d writes, %d files (%d passed); want 16, the response and the file", ret, nw, nf, len(fds))
	}
	// The first write is the 8-byte core response, the second the file's number at its start.
	if addr, n, f := le.Uint64(reply[8:]), le.Uint32(reply[16:]), int32(le.Uint32(reply[20:])); addr != 0x1000 || n != 8 || f != -1 {
		t.Errorf("first write: %d bytes at 0x%x (file %d), want the 8-byte response at 0x1000", n, addr, f)
	}
	if addr, n, f := le.Uint64(reply[24:]), le.Uint32(reply[32:]), int32(le.Uint32(reply[36:])); addr != 0x1000 || n != 4 || f != 0 {
		t.Errorf("second write: %d bytes at 0x%x (file %d), want file 0's number at 0x1000", n, addr, f)
	}
	if _, err := c.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if reply, _ := recv(t, c); int32(le.Uint32(reply)) != -int32(unix.EINVAL) {
		t.Errorf("a 3-byte command: ret %d, want -EINVAL", int32(le.Uint32(reply)))
	}
}

// TestNetlinkConnection: a netlink hello, then a device dump answered as nldev answers it.
func TestNetlinkConnection(t *testing.T) {
	c := dial(t, startDaemon(t), KindNetlink, 4242)
	if hello, _ := recv(t, c); binary.LittleEndian.Uint32(hello) != 0 {
		t.Fatalf("netlink hello refused: %x", hello)
	}
	req := make([]byte, 16)
	binary.LittleEndian.PutUint32(req, 16)
	binary.LittleEndian.PutUint16(req[4:], 0x5<<10|1) // RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET
	binary.LittleEndian.PutUint16(req[6:], 0x301)     // NLM_F_REQUEST | NLM_F_DUMP
	binary.LittleEndian.PutUint32(req[8:], 77)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	msg, _ := recv(t, c)
	if len(msg) < 16 || binary.LittleEndian.Uint32(msg[8:]) != 77 || binary.LittleEndian.Uint32(msg[12:]) != 4242 {
		t.Fatalf("dump reply %x: want sequence 77 and port id 4242", msg)
	}
}

// TestBadHello: a hello of another protocol version is refused with EPROTO, and the connection
// ends.
func TestBadHello(t *testing.T) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: startDaemon(t), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var h [HelloSize]byte
	binary.LittleEndian.PutUint32(h[:], Magic)
	binary.LittleEndian.PutUint32(h[4:], Version+1)
	if _, err := c.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	if r, _ := recv(t, c); binary.LittleEndian.Uint32(r) != uint32(unix.EPROTO) {
		t.Fatalf("hello of version %d answered %x, want EPROTO", Version+1, r)
	}
}

// A status hello answers by its argument: the programs connected (a probe that never says
// hello, and status queries, are none), the heap in KiB, the open files; 0 for what it does not
// know.
func TestStatus(t *testing.T) {
	sock := startDaemon(t)
	ask := func(what uint32) uint32 {
		t.Helper()
		c := dial(t, sock, KindStatus, what)
		v, err := ReadAnswer(c)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	probe, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if n := ask(StatusConnections); n != 0 {
		t.Fatalf("%d programs with a probe and a status query open, want 0", n)
	}
	prog := dial(t, sock, KindUverbs, 0)
	if _, err := ReadAnswer(prog); err != nil {
		t.Fatal(err)
	}
	if n := ask(StatusConnections); n != 1 {
		t.Fatalf("%d programs with one connected, want 1", n)
	}
	if heap, files := ask(StatusHeapKiB), ask(StatusFiles); heap == 0 || files < 3 {
		t.Fatalf("heap %d KiB, %d files", heap, files)
	}
	if v := ask(99); v != 0 {
		t.Fatalf("status 99 answered %d, want 0", v)
	}
}
