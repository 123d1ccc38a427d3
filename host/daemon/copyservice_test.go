package daemon

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeProgram serves memory as the preload library's copy service does, from mem at base:
// EIO for what lies outside it. It answers nothing once mute is set.
func fakeProgram(t *testing.T, c *net.UnixConn, base uint64, mem []byte, mute <-chan struct{}) {
	buf := make([]byte, MaxMessage)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		select {
		case <-mute:
			continue
		default:
		}
		op, l, addr := binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint32(buf[4:]), binary.LittleEndian.Uint64(buf[8:])
		rep := make([]byte, memReplyHeader)
		if addr < base || addr-base+uint64(l) > uint64(len(mem)) {
			binary.LittleEndian.PutUint32(rep, uint32(syscall.EIO))
		} else if op == memWrite {
			copy(mem[addr-base:], buf[memReqHeader:n])
			binary.LittleEndian.PutUint32(rep[4:], l)
		} else {
			binary.LittleEndian.PutUint32(rep[4:], l)
			rep = append(rep, mem[addr-base:addr-base+uint64(l)]...)
		}
		if _, err := c.Write(rep); err != nil {
			return
		}
	}
}

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := osFile(fd)
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return cs[0], cs[1]
}

// The copy service moves bytes both ways in chunks of a message (a copy of 200 KiB takes four
// round trips), a copy outside the program's memory fails with its errno and leaves the
// service up, and a program that stops answering fails the copy within memTimeout and loses
// its service; a copy for a process with none fails too.
func TestCopyService(t *testing.T) {
	memTimeout = 200 * time.Millisecond
	defer func() { memTimeout = memTimeoutDefault }()
	var cs copyServices
	ours, theirs := pair(t)
	mem := make([]byte, 256<<10)
	mute := make(chan struct{})
	go fakeProgram(t, theirs, 0x10000, mem, mute)
	served := make(chan struct{})
	go func() { cs.serve(42, ours, nil); close(served) }()
	m := processMemory{pid: 42, svc: &cs}
	want := bytes.Repeat([]byte("softirdma"), 200<<10/9)
	if err := m.WriteAt(want, 0x10000+100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[100:100+len(want)], want) {
		t.Fatal("the write did not land")
	}
	got := make([]byte, len(want))
	if err := m.ReadAt(got, 0x10000+100); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %v", err)
	}
	if err := m.ReadAt(got[:8], 0x1000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a read outside the program's memory: %v, want EIO", err)
	}
	if err := m.ReadAt(got[:8], 0x10000); err != nil {
		t.Fatalf("after an error the service still serves: %v", err)
	}
	close(mute)
	start := time.Now()
	if err := m.ReadAt(got[:8], 0x10000); err == nil || time.Since(start) > 2*memTimeout {
		t.Fatalf("a program that does not answer: %v after %v", err, time.Since(start))
	}
	select {
	case <-served:
	case <-time.After(time.Second):
		t.Fatal("the service of a program that stopped answering was kept")
	}
	if err := (processMemory{pid: 7, svc: &cs}).ReadAt(got[:8], 0x10000); !errors.Is(err, errNoService) {
		t.Fatalf("a process with no service: %v", err)
	}
}

func osFile(fd int) *os.File { return os.NewFile(uintptr(fd), "socketpair") }

// A copy service ends when its process hangs up (it ended), and when the daemon closes, though
// softirdma never reads from it between copies.
func TestCopyServiceEnds(t *testing.T) {
	var cs copyServices
	for _, how := range []string{"the process hangs up", "the daemon closes"} {
		ours, theirs := pair(t)
		closing := make(chan struct{})
		served := make(chan struct{})
		go func() { cs.serve(43, ours, closing); close(served) }()
		if how == "the daemon closes" {
			close(closing)
		} else {
			theirs.Close()
		}
		select {
		case <-served:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the service goes on", how)
		}
	}
}
