package sockguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envServer makes the test binary a server that lends its one connection to a guard (when it
// is "guarded") and never reads from it, as a server busy elsewhere when it is killed.
const envServer = "SOCKGUARD_TEST_SERVER"

func TestMain(m *testing.M) {
	RunIfGuard()
	if v, ok := os.LookupEnv(envServer); ok {
		os.Exit(testServer(v))
	}
	os.Exit(m.Run())
}

func testServer(v string) int {
	mode, path, _ := strings.Cut(v, ":")
	var g *Guard
	if mode == "guarded" {
		var err error
		if g, err = Start(); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	pid := 0
	if g != nil {
		pid = g.Pid()
	}
	fmt.Println("listening", pid)
	conn, err := ln.AcceptUnix()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if g != nil {
		if _, err := g.Hold(conn); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	fmt.Println("held")
	select {}
}

// request is what a vfio-user client has in flight when its server dies: a posted region
// write's 36 bytes, unread.
var request = make([]byte, 36)

// startServer runs the test binary as a server in mode and connects to it; it returns the
// connection, the server and its guard's pid (0 unguarded).
func startServer(t *testing.T, mode string) (*net.UnixConn, *exec.Cmd, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envServer+"="+mode+":"+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	expect := func(word string) string {
		if !lines.Scan() {
			t.Fatalf("server said nothing (want %q): %v", word, lines.Err())
		}
		rest, ok := strings.CutPrefix(lines.Text(), word)
		if !ok {
			t.Fatalf("server said %q, want %q", lines.Text(), word)
		}
		return strings.TrimSpace(rest)
	}
	guardPid, _ := strconv.Atoi(expect("listening"))
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	expect("held")
	return conn, cmd, guardPid
}

// readEnd reads conn once, as QEMU's receive path does, and returns the error (io.EOF for end
// of file).
func readEnd(t *testing.T, conn *net.UnixConn) error {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [64]byte
	n, err := conn.Read(b[:])
	if n != 0 {
		t.Fatalf("read %d bytes, want none", n)
	}
	return err
}

// gone waits until pid has exited (it may stay a zombie of whoever adopted it).
func gone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			return
		}
	}
	t.Fatalf("guard %d still runs after its server died", pid)
}

func TestServerKilledWithUnreadDataResetsPeerUnguarded(t *testing.T) {
	conn, srv, _ := startServer(t, "bare")
	if _, err := conn.Write(request); err != nil {
		t.Fatal(err)
	}
	srv.Process.Kill()
	srv.Wait()
	if err := readEnd(t, conn); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the server died = %v, want ECONNRESET (what the guard is for)", err)
	}
}

func TestServerKilledWithUnreadDataPeerReadsEOFGuarded(t *testing.T) {
	conn, srv, guard := startServer(t, "guarded")
	if guard == 0 {
		t.Fatal("no guard pid")
	}
	if _, err := conn.Write(request); err != nil {
		t.Fatal(err)
	}
	srv.Process.Kill()
	srv.Wait()
	if err := readEnd(t, conn); err != io.EOF {
		t.Fatalf("read after the server died = %v, want end of file", err)
	}
	// The guard shut the connection down: the client's next write fails at once.
	if _, err := conn.Write(request); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after the server died = %v, want EPIPE", err)
	}
	gone(t, guard)
}

// pair is a connected client and server end, in this process.
func pair(t *testing.T) (client, server *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func waitFDs(t *testing.T, pid, want int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if fdCount(t, pid) == want {
			return
		}
	}
	t.Fatalf("guard holds %d descriptors, want %d", fdCount(t, pid), want)
}

func TestServerEndsGuardedConnectionCleanly(t *testing.T) {
	g, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	base := fdCount(t, g.Pid())
	client, server := pair(t)
	release, err := g.Hold(server)
	if err != nil {
		t.Fatal(err)
	}
	waitFDs(t, g.Pid(), base+1)

	// Unread data and a descriptor in flight: CloseConn discards both, and the client reads
	// end of file although the guard still has its copy.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := client.WriteMsgUnix(request, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	bytes, fds := CloseConn(server)
	if bytes != len(request) || fds != 1 {
		t.Fatalf("CloseConn discarded %d bytes and %d fds, want %d and 1", bytes, fds, len(request))
	}
	if err := readEnd(t, client); err != io.EOF {
		t.Fatalf("client read %v, want end of file", err)
	}
	release()
	release() // once is enough; a second is harmless
	waitFDs(t, g.Pid(), base)

	if err := g.Close(); err != nil {
		t.Fatalf("guard exit: %v", err)
	}
	if _, err := g.Hold(server); err == nil {
		t.Fatal("Hold after Close worked")
	}
}

func TestClosedConnectionResetsPeerWithoutDrain(t *testing.T) {
	// The control for the test above: a plain close with unread data resets the peer.
	client, server := pair(t)
	if _, err := client.Write(request); err != nil {
		t.Fatal(err)
	}
	server.Close()
	if err := readEnd(t, client); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read %v, want ECONNRESET", err)
	}
}

func TestGuardCloseEndsWhatItStillHolds(t *testing.T) {
	g, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	client, server := pair(t)
	if _, err := g.Hold(server); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(request); err != nil {
		t.Fatal(err)
	}
	// The server leaves without ending the connection (its copy stays open): the guard shuts
	// it down as it exits, and the client reads end of file.
	if err := g.Close(); err != nil {
		t.Fatalf("guard exit: %v", err)
	}
	if err := readEnd(t, client); err != io.EOF {
		t.Fatalf("client read %v, want end of file", err)
	}
}

func TestGuardIgnoresTerminationSignals(t *testing.T) {
	g, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if err := syscall.Kill(g.Pid(), sig); err != nil {
			t.Fatal(err)
		}
	}
	// A signal with its default action would have ended the guard at once; it exits only as
	// its server goes, with status 0.
	if err := g.Close(); err != nil {
		t.Fatalf("guard exit after SIGINT, SIGTERM and SIGHUP: %v", err)
	}
}
