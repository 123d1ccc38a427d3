package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/servetest"
	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

// serve listens on its socket, prints the QEMU command line, answers vfio-user clients as the
// softirdma function, logs a line for each that goes, and stops cleanly (socket gone, status 0)
// when its context ends.
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
	code, ended := 0, make(chan struct{})
	go func() {
		code = serve(ctx, serveOptions{socket: sock, ip: netip.MustParseAddr("192.0.2.1"), mac: [6]byte{2, 0x53, 0x52, 0, 0, 1}, link: link}, &out, &errs)
		close(ended)
	}()
	// The lines come in more than one write: wait for the command line itself.
	waitFor(t, "the QEMU command line serve prints once its socket listens", func() bool {
		return strings.Contains(out.String(), "listening on") && strings.Contains(out.String(), "\n  "+qemuCommandLine(sock)+"\n")
	}, ended, &errs)
	// Each client that goes leaves a line with the process's goroutines and descriptors.
	for i := 1; i <= 2; i++ {
		dialFunction(t, sock).Close()
		waitFor(t, "a line for the client gone", func() bool { return len(clientGone.FindAllString(errs.String(), -1)) == i }, ended, &errs)
	}
	cancel()
	select {
	case <-ended:
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

// clientGone is the line serve logs for each client that went.
var clientGone = regexp.MustCompile(`level=INFO msg="client gone" err=<nil> goroutines=[0-9]+ fds=[0-9]+\n`)

// waitFor polls until cond holds, for up to 10 s, and fails the test with serve's log if it
// does not, or if serve ended first (ended closed).
func waitFor(t *testing.T, what string, cond func() bool, ended <-chan struct{}, log *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		select {
		case <-ended:
			t.Fatalf("serve ended before %s:\n%s", what, log.String())
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s:\n%s", what, log.String())
		}
	}
}

// dialFunction connects a vfio-user client to serve's socket and checks that the softirdma
// function answers it.
func dialFunction(t *testing.T, sock string) *vfiouser.Client {
	t.Helper()
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
	return c
}

func TestServeFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-socket", "x", "-ip", "nope"}, {"-socket", "x", "-mac", "zz"}, {"-socket", "x", "extra"},
		{"-socket", "x", "-link", "bogus"}, {"-socket", "x", "-link", "dgram:127.0.0.1:1"}, {"-socket", "x", "-loss", "0.9"},
		{"-socket", "x", "-pcap", "x.pcap"}} {
		var out, errs bytes.Buffer
		if code := dispatch(append([]string{"serve"}, args...), &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("serve %v: exit %d, stderr %q", args, code, errs.String())
		}
	}
}

// Once serve has its logger, what stops it is a log record at level ERROR, and the exit status
// is 1.
func TestServeErrorsAreLogged(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		o    serveOptions
		want string
	}{
		{serveOptions{socket: filepath.Join(dir, "no", "such", "dir", "s.sock")}, `level=ERROR msg="cannot listen"`},
		{serveOptions{socket: filepath.Join(dir, "s.sock"), link: &linkFlags{link: "dgram:256.0.0.1:1,127.0.0.1:9", ip: "192.0.2.1", mac: "02:00:00:00:00:01"}},
			`level=ERROR msg="cannot open the link" link=dgram:256.0.0.1:1,127.0.0.1:9`},
	} {
		c.o.ip = netip.MustParseAddr("192.0.2.1")
		var out, errs bytes.Buffer
		if code := serve(context.Background(), c.o, &out, &errs); code != 1 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("serve %+v: exit %d, stderr %q, want %q", c.o, code, errs.String(), c.want)
		}
	}
}

// -pcap without -link is refused before anything starts (the loopback's frames are not
// captured: the file would stay empty), rather than ignored.
func TestServePcapNeedsLink(t *testing.T) {
	dir := t.TempDir()
	sock, pcap := filepath.Join(dir, "s.sock"), filepath.Join(dir, "x.pcap")
	code, out, errs := runCLI("serve", "-socket", sock, "-pcap", pcap)
	if code != 2 || out != "" || !strings.Contains(errs, "-pcap needs -link") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("serve made %v before refusing", ents)
	}
}

// The printed command line is one a shell splits into QEMU's arguments, the -device JSON naming
// the socket whatever its path holds.
func TestQEMUCommandLine(t *testing.T) {
	sock := "/tmp/it's a \"dir\"/$HOME/dev.sock"
	line := qemuCommandLine(sock)
	// The shell prints each word the line splits into on a line of its own.
	out, err := exec.Command("sh", "-c", "printf '%s\\n' "+line).Output()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	want := []string{"qemu-system-x86_64", "-machine", "q35,memory-backend=mem", "-object", "memory-backend-memfd,id=mem,size=512M,share=on", "-device"}
	if len(words) != len(want)+1 || !slices.Equal(words[:len(want)], want) {
		t.Fatalf("the shell splits %q into %q", line, words)
	}
	var dev struct {
		Driver string
		Socket struct{ Path, Type string }
	}
	if err := json.Unmarshal([]byte(words[len(want)]), &dev); err != nil || dev.Driver != "vfio-user-pci" || dev.Socket.Path != sock || dev.Socket.Type != "unix" {
		t.Fatalf("-device %s: %+v %v", words[len(want)], dev, err)
	}
}

// TestMain lets a test run the command as a process of its own: the test binary started again
// with SOFTIRDMA_TEST_MAIN set is softirdma, its arguments the command's.
func TestMain(m *testing.M) {
	sockguard.RunIfGuard()
	if os.Getenv("SOFTIRDMA_TEST_MAIN") != "" {
		main()
	}
	os.Exit(m.Run())
}

// SIGINT and SIGTERM each stop serve, as a process, cleanly: status 0 and the socket removed,
// idle or with a client connected that has given it guest memory; the client is released and
// cut off.
func TestServeStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, connected := range []bool{false, true} {
			name := "idle"
			if connected {
				name = "connected"
			}
			t.Run(unix.SignalName(sig)+"/"+name, func(t *testing.T) { testServeSignal(t, sig, connected) })
		}
	}
}

func testServeSignal(t *testing.T, sig syscall.Signal, connected bool) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(os.Args[0], "serve", "-socket", sock)
	cmd.Env = append(os.Environ(), "SOFTIRDMA_TEST_MAIN=1")
	serve := servetest.Start(t, cmd, sock)
	var c *vfiouser.Client
	if connected {
		c = dialFunction(t, sock)
		defer c.Close()
		ram, err := unix.MemfdCreate("guest", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(ram)
		if err := unix.Ftruncate(ram, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := c.DMAMap(0, 1<<20, ram, 0, vfiouser.DMARead|vfiouser.DMAWrite); err != nil {
			t.Fatal(err)
		}
	}
	serve.Stop(sig) // checks status 0 and the socket removed
	if !strings.Contains(serve.Log(), "msg=stopped") {
		t.Fatalf("no stopped line:\n%s", serve.Log())
	}
	if connected {
		if !clientGone.MatchString(serve.Log()) {
			t.Fatalf("the client was not released:\n%s", serve.Log())
		}
		if _, err := c.GetDeviceInfo(); err == nil {
			t.Fatal("the client is still answered after serve stopped")
		}
	}
}

// serve killed by SIGKILL while a request its client sent lies unread (serve stopped first, so
// that it cannot read it): the client reads end of file, not the reset a close with unread data
// gives (QEMU 11.1 aborts on that reset), because serve's socket guard ends the connection; the
// guard says what it discarded and exits.
func TestServeKilledClientReadsEndOfFile(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(os.Args[0], "serve", "-socket", sock)
	cmd.Env = append(os.Environ(), "SOFTIRDMA_TEST_MAIN=1")
	serve := servetest.Start(t, cmd, sock)
	// serve says the guard's pid once it listens: the line may come just after the socket.
	guardLine := regexp.MustCompile(`msg="socket guard" pid=[0-9]+`)
	for deadline := time.Now().Add(30 * time.Second); !guardLine.MatchString(serve.Log()); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no socket guard started:\n%s", serve.Log())
		}
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(serve.Log(), "client connected"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not take the connection:\n%s", serve.Log())
		}
	}
	if err := syscall.Kill(serve.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// kill returns before the stop takes: wait until every thread of serve has stopped, or
	// serve could still read what comes next.
	waitStopped(t, serve.Pid())
	// A posted REGION_WRITE of 4 bytes to BAR 0, as a guest's doorbell reaches QEMU's client.
	// Header: id, command, size, flags; then offset, region, count and the data.
	msg := make([]byte, vfiouser.HeaderSize+16+4)
	binary.LittleEndian.PutUint16(msg[2:], uint16(vfiouser.CmdRegionWrite))
	binary.LittleEndian.PutUint32(msg[4:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[8:], vfiouser.FlagNoReply)
	binary.LittleEndian.PutUint32(msg[vfiouser.HeaderSize+12:], 4)
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	serve.Kill()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [64]byte
	if n, err := conn.Read(b[:]); n != 0 || err != io.EOF {
		t.Fatalf("the client read %d bytes, %v after serve was killed; want end of file\n%s", n, err, serve.Log())
	}
	want := fmt.Sprintf("softirdma-sockguard: the server is gone; 1 connection(s) shut down, %d unread bytes and 0 descriptors discarded, closed", len(msg))
	if !strings.Contains(serve.Log(), want) {
		t.Fatalf("no line from the guard:\n%s", serve.Log())
	}
}

// waitStopped waits (30 s at most) until every thread of process pid is stopped by a signal.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	stopped := func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			i := bytes.LastIndexByte(stat, ')')
			if err != nil || i < 0 || !bytes.HasPrefix(stat[i+1:], []byte(" T")) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !stopped(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
	}
}

// A -socket serve cannot listen on, or a -pcap that is a directory, is refused before anything
// starts: one line naming the flag and the real cause (bind alone says "address already in use"
// or "invalid argument"), exit 2, nothing made.
func TestServeRefusesBadPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("x", 108-len(dir)-1)) // 108 bytes: no room for the NUL
	fits := filepath.Join(dir, strings.Repeat("y", 107-len(dir)-1))
	link := []string{"-link", "dgram:127.0.0.1:0,127.0.0.1:9", "-ip", "192.0.2.1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-socket", dir}, "softirdma serve: -socket " + dir + " is a directory: give the path of a socket file to make, e.g. -socket " + dir + "/softirdma.sock\n"},
		{[]string{"-socket", file}, "softirdma serve: -socket " + file + " exists and is not a socket: serve replaces only a socket; remove the file or choose another path\n"},
		{[]string{"-socket", long}, "softirdma serve: -socket " + long + " is 108 bytes; a Unix socket path is at most 107 (the kernel's 108 with its NUL): choose a shorter path, e.g. /tmp/softirdma.sock\n"},
		{[]string{"-socket", filepath.Join(dir, "no", "s.sock")}, "softirdma serve: -socket " + dir + "/no/s.sock: its directory " + dir + "/no: no such file or directory\n"},
		{append([]string{"-socket", filepath.Join(dir, "s.sock"), "-pcap", dir}, link...), "softirdma serve: -pcap " + dir + " is a directory: give the file to write the capture to, e.g. -pcap " + dir + "/link.pcap\n"},
	} {
		code, out, errs := runCLI(append([]string{"serve"}, c.args...)...)
		if code != 2 || out != "" || errs != c.want {
			t.Errorf("serve %v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errs, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("serve made %v before refusing", ents)
	}
	// A path of 107 bytes is one the kernel takes.
	code, err := make(chan int, 1), make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs lockedBuffer
	go func() {
		code <- serve(ctx, serveOptions{socket: fits, ip: netip.MustParseAddr("192.0.2.1"), mac: [6]byte{2, 0, 0, 0, 0, 1}}, &out, &errs)
		err <- errs.String()
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "listening on"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve on a 107-byte path did not listen: %s", <-err)
		}
	}
	if c := checkSocketPath(fits); c != nil {
		t.Errorf("a 107-byte path refused: %v", c)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("serve on a 107-byte path: exit %d\n%s", c, <-err)
	}
}

// A serve that cannot start says why in one line and nothing before it: no socket guard line,
// and a pcap that cannot be made is not called a link error.
func TestServeStartFailureIsOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		o    serveOptions
		want string
	}{
		{serveOptions{socket: filepath.Join(dir, "no", "s.sock")}, `level=ERROR msg="cannot listen"`},
		{serveOptions{socket: filepath.Join(dir, "s.sock"), link: &linkFlags{link: "dgram:127.0.0.1:0,127.0.0.1:9", ip: "192.0.2.1", pcap: filepath.Join(dir, "no", "x.pcap")}},
			`level=ERROR msg="cannot create the pcap" pcap=` + filepath.Join(dir, "no", "x.pcap") + ` err="open ` + filepath.Join(dir, "no", "x.pcap") + `: no such file or directory"`},
	} {
		c.o.ip = netip.MustParseAddr("192.0.2.1")
		var out, errs bytes.Buffer
		code := serve(context.Background(), c.o, &out, &errs)
		if code != 1 || strings.Count(errs.String(), "\n") != 1 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("serve %+v: exit %d, stderr %q, want one line with %q", c.o, code, errs.String(), c.want)
		}
	}
}

// serve's help shows what each flag takes, and which of -socket and -function to use.
func TestServeHelp(t *testing.T) {
	code, out, _ := runCLI("help", "serve")
	for _, want := range []string{
		"\n  -socket PATH\n", "\n  -function name=NAME,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE]\n", "\n  -pcap FILE\n",
		"\n  -control PATH\n", "\n  -fault FAULT\n", "\n  -link LINK\n", "\n  -ip ADDR\n", "\n  -mac MAC\n", "\n  -cpuprofile FILE\n", "\n  -rate RATE\n", "\n  -procs N\n",
		"-socket serves one function (one VM)", "-function, once per VM, serves several (one serve, several VMs)",
		"from=    the sender: a function's name, or uplink",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("serve's help has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "-control softirdma fault") {
		t.Errorf("-control's argument is named after the command that uses it:\n%s", out)
	}
}
