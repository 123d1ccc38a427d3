package daemon

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// uverbsConn is a program's uverbs connection past its hello, with the context open.
func uverbsConn(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	c := dial(t, sock, KindUverbs, 0)
	if hello, _ := recv(t, c); binary.LittleEndian.Uint32(hello) != 0 {
		t.Fatalf("uverbs hello refused: %x", hello)
	}
	return c
}

// exchange sends a command and returns write()'s result as softirdma answers it.
func exchange(t *testing.T, c *net.UnixConn, cmd []byte) int32 {
	t.Helper()
	if _, err := c.Write(cmd); err != nil {
		t.Fatal(err)
	}
	reply, _ := recv(t, c)
	return int32(binary.LittleEndian.Uint32(reply))
}

// legacy frames a legacy uverbs command with a core of n bytes from fields.
func legacy(cmd uint32, out int, fields ...uint64) []byte {
	b := make([]byte, 8, 8+8*len(fields))
	binary.LittleEndian.PutUint32(b, cmd)
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint64(b, f)
	}
	binary.LittleEndian.PutUint16(b[4:], uint16(len(b)/4))
	binary.LittleEndian.PutUint16(b[6:], uint16(out/4))
	return b
}

// serving says softirdma still serves: a new program opens a context.
func serving(t *testing.T, sock string) {
	t.Helper()
	c := uverbsConn(t, sock)
	if ret := exchange(t, c, legacy(0, 8, 0x1000)); ret != 16 {
		t.Fatalf("a new program's GET_CONTEXT: %d, want 16", ret)
	}
}

// hostileChild is set in a process TestHostilePrograms starts for one of its cases: the
// socket of the parent's softirdma.
var hostileChild = os.Getenv("SOFTIRDMA_HOSTILE_SOCK")

// TestHostilePrograms: a program that writes garbage, truncated or out-of-order commands and
// netlink messages, names handles it has not, or leaves or is killed in the middle of a command
// gets the kernel's errno (or its own end); softirdma goes on serving the others. Each case is a
// process of its own: the test binary again, running that case alone against this softirdma.
func TestHostilePrograms(t *testing.T) {
	sock := hostileChild
	if sock == "" {
		sock = startDaemon(t)
	}
	type hostile struct {
		name   string
		run    func(t *testing.T, sock string)
		killed bool // the case ends its process with SIGKILL
	}
	var cases []hostile
	for _, c := range []struct {
		name string
		cmd  []byte
		want syscall.Errno
	}{
		{"a header of 4 bytes", []byte{1, 0, 0, 0}, syscall.EINVAL},
		{"in_words past what was written", func() []byte { b := legacy(3, 4, 0x1000); b[4] = 200; return b }(), syscall.EINVAL},
		{"a command before GET_CONTEXT", legacy(3, 4, 0x1000), syscall.EINVAL},
		{"an extended command with a reserved word set", func() []byte {
			b := make([]byte, 32)
			binary.LittleEndian.PutUint32(b, 0x80000001)
			binary.LittleEndian.PutUint16(b[4:], 1)
			binary.LittleEndian.PutUint16(b[6:], 38)
			binary.LittleEndian.PutUint64(b[8:], 0x1000)
			b[20] = 1
			return b
		}(), syscall.EINVAL},
		{"a command number past the table", legacy(0xff, 4, 0x1000), syscall.EOPNOTSUPP},
	} {
		cases = append(cases, hostile{name: c.name, run: func(t *testing.T, sock string) {
			conn := uverbsConn(t, sock)
			if ret := exchange(t, conn, c.cmd); ret != -int32(c.want) {
				t.Errorf("write returned %d, want -%d (%v)", ret, c.want, c.want)
			}
		}})
	}
	cases = append(cases, hostile{name: "handles it has not", run: func(t *testing.T, sock string) {
		conn := uverbsConn(t, sock)
		if ret := exchange(t, conn, legacy(0, 8, 0x1000)); ret != 16 {
			t.Fatalf("GET_CONTEXT: %d", ret)
		}
		for _, cmd := range [][]byte{
			legacy(4, 0, 77),                      // DEALLOC_PD 77
			legacy(13, 0, 5),                      // DEREG_MR 5
			legacy(27, 4, 0x1000, 9),              // DESTROY_QP 9
			legacy(20, 8, 0x1000, 9),              // DESTROY_CQ 9
			legacy(28, 4, 0x1000, 9, 128<<32),     // POST_SEND to QP 9
			legacy(9, 12, 0x1000, 0, 4096, 0, 77), // REG_MR on PD 77
		} {
			if ret := exchange(t, conn, cmd); ret != -int32(syscall.EINVAL) {
				t.Errorf("command %d naming no object: %d, want -EINVAL", cmd[0], ret)
			}
		}
	}}, hostile{name: "garbage", run: func(t *testing.T, sock string) {
		rnd := rand.New(rand.NewPCG(1, 2))
		conn := uverbsConn(t, sock)
		exchange(t, conn, legacy(0, 8, 0x1000))
		for range 2000 {
			b := make([]byte, 16+8*rnd.IntN(40))
			for i := range b {
				b[i] = byte(rnd.Uint32())
			}
			// A plausible header now and then, so that handlers, not just the framing, see garbage.
			if rnd.IntN(2) == 0 {
				binary.LittleEndian.PutUint32(b, uint32(rnd.IntN(41)))
				binary.LittleEndian.PutUint16(b[4:], uint16(len(b)/4))
				binary.LittleEndian.PutUint16(b[6:], uint16(rnd.IntN(64)))
				binary.LittleEndian.PutUint64(b[8:], 0) // no response pointer into the test's memory
			}
			if ret := exchange(t, conn, b); ret > 0 && int(ret) != len(b) {
				t.Fatalf("write of %d bytes returned %d", len(b), ret)
			}
		}
	}}, hostile{name: "leaves in the middle of a command", run: func(t *testing.T, sock string) {
		for range 20 {
			conn := uverbsConn(t, sock)
			if _, err := conn.Write(legacy(0, 8, 0x1000)); err != nil {
				t.Fatal(err)
			}
			conn.Close()
		}
	}}, hostile{name: "killed in the middle of a command", killed: true, run: func(t *testing.T, sock string) {
		conn := uverbsConn(t, sock)
		exchange(t, conn, legacy(0, 8, 0x1000))
		exchange(t, conn, legacy(3, 4, 0x1000)) // ALLOC_PD
		if _, err := conn.Write(legacy(17, 4, 0x1000)); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}}, hostile{name: "netlink garbage", run: func(t *testing.T, sock string) {
		conn := dial(t, sock, KindNetlink, 1)
		recv(t, conn)
		for _, m := range [][]byte{{1, 2, 3}, make([]byte, 16), {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}, make([]byte, 4096)} {
			if _, err := conn.Write(m); err != nil {
				t.Fatal(err)
			}
		}
	}}, hostile{name: "a hello that is not one", run: func(t *testing.T, sock string) {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Close()
	}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if hostileChild != "" {
				c.run(t, sock)
				return
			}
			pattern := "^TestHostilePrograms$/^" + regexp.QuoteMeta(strings.ReplaceAll(c.name, " ", "_")) + "$"
			cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1")
			cmd.Env = append(os.Environ(), "SOFTIRDMA_HOSTILE_SOCK="+sock)
			out, err := cmd.CombinedOutput()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			switch {
			case c.killed && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL):
				t.Fatalf("the program was to be killed: %v\n%s", err, out)
			case !c.killed && err != nil:
				t.Fatalf("the program: %v\n%s", err, out)
			}
			serving(t, sock)
		})
	}
}

// closeReceived reads one message and closes the files it carries at once.
func closeReceived(t *testing.T, c *net.UnixConn) {
	t.Helper()
	b, oob := make([]byte, MaxMessage), make([]byte, unix.CmsgSpace(4*MaxFiles))
	_, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		t.Fatal(err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		fds, _ := unix.ParseUnixRights(&m)
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// openFDs is how many files this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestManyProgramsLeaveNothing: 1,000 programs that open a context, make a PD and a completion
// channel, and leave (half of them in the middle of a command, as a
// program killed) leave softirdma's files and goroutines where they started.
func TestManyProgramsLeaveNothing(t *testing.T) {
	sock := startDaemon(t)
	serving(t, sock) // the first connection's one-time costs, before the baseline
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	fds, gs := openFDs(t), runtime.NumGoroutine()
	for i := range 1000 {
		c := dial(t, sock, KindUverbs, 0)
		// The files softirdma hands the program are the program's: closed as it goes.
		closeReceived(t, c)
		for _, cmd := range [][]byte{legacy(0, 8, 0x1000), legacy(3, 4, 0x1000), legacy(17, 4, 0x1000)} {
			if _, err := c.Write(cmd); err != nil {
				t.Fatal(err)
			}
			closeReceived(t, c)
		}
		if i%2 == 1 {
			c.Write(legacy(3, 4, 0x1000)) // and gone before the answer, as a program killed
		}
		c.Close()
	}
	// The daemon notices each end as it reads it: wait for the counts to come back.
	deadline := time.Now().Add(20 * time.Second)
	for openFDs(t) > fds+2 || runtime.NumGoroutine() > gs+2 {
		if time.Now().After(deadline) {
			kinds := map[string]int{}
			ents, _ := os.ReadDir("/proc/self/fd")
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				if len(l) > 12 {
					l = l[:12]
				}
				kinds[l]++
			}
			t.Logf("open files by kind: %v", kinds)
			t.Fatalf("after 1000 programs: %d files open (%d before), %d goroutines (%d before)", openFDs(t), fds, runtime.NumGoroutine(), gs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc+4<<20 {
		t.Fatalf("after 1000 programs the heap holds %d bytes, %d before", after.HeapAlloc, before.HeapAlloc)
	}
}
