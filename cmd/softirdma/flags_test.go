package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire/afpacket"

	"github.com/softirdma/softirdma/internal/lockedbuf"
)

// TestNumericFlagsRefused: every numeric flag of the peers (and links) is checked before
// anything is opened: exit 2 at once, with one line naming the flag and what it accepts.
func TestNumericFlagsRefused(t *testing.T) {
	link := []string{"-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1"}
	type bad struct{ flag, value, accepted string }
	peer := []bad{
		{"p", "0", "1..65535"}, {"p", "70000", "1..65535"}, {"p", "-1", "1..65535"},
		{"s", "0", "1..8388608"}, {"s", "-1", "1..8388608"}, {"s", "99999999999", "1..8388608"},
		{"m", "1000", "256, 512, 1024, 2048, 4096"}, {"m", "0", "256, 512, 1024, 2048, 4096"},
		{"timeout", "-1s", "0s or more"}, {"wait", "-5s", "0s or more"},
		{"u", "32", "0..31"}, {"u", "-1", "0..31"}, {"retry", "8", "0..7"}, {"retry", "-1", "0..7"},
		{"loss", "2", "0..0.5"}, {"loss", "-0.1", "0..0.5"}, {"loss", "NaN", "0..0.5"},
		{"send-window", "0", "1..32768"}, {"send-window", "-1", "1..32768"}, {"send-window", "32769", "1..32768"},
	}
	type cmdCase struct {
		cmd  []string
		bads []bad
	}
	cases := []cmdCase{
		{[]string{"pingpong"}, append([]bad{
			{"n", "0", "1..100000000"}, {"n", "-5", "1..100000000"}, {"r", "0", "1..16384"}, {"r", "20000", "1..16384"},
			{"g", "2", "0..1"}, {"g", "-1", "0..1"}}, peer...)},
		{[]string{"perf", "write"}, append([]bad{
			{"n", "0", "5..100000000"}, {"n", "-5", "5..100000000"}, {"n", "4", "5..100000000"}, {"t", "0", "1..15000"}, {"t", "20000", "1..15000"},
			{"o", "0", "1..128"}, {"o", "129", "1..128"}, {"rate_limit", "-1", "0..100000000"}, {"x", "2", "0..1"}, {"x", "-1", "0..1"}}, peer...)},
		{[]string{"perf", "atomic"}, []bad{{"s", "4096", "atomic messages are always 8 bytes"}}},
		{[]string{"links"}, []bad{{"for", "-1s", "0s or more"}}},
	}
	for _, c := range cases {
		for _, b := range c.bads {
			for _, role := range [][]string{{"-server"}, {"127.0.0.1"}} {
				args := append(append([]string(nil), c.cmd...), "-"+b.flag, b.value)
				if c.cmd[0] != "links" {
					args = append(append(args, role...), link...)
				}
				start := time.Now()
				code, out, errOut := runCLI(args...)
				want := fmt.Sprintf("softirdma %s: -%s %s is out of range (%s)\n", c.cmd[0], b.flag, b.value, b.accepted)
				if code != 2 || errOut != want || out != "" {
					t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", args, code, errOut, out, want)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("%v took %v", args, d)
				}
				if c.cmd[0] == "links" {
					break
				}
			}
		}
	}
	// A number the parser cannot take is one line too, and where to find the flags.
	code, _, errOut := runCLI("pingpong", "-p", "99999999999999999999", "-server")
	if code != 2 || errOut != "invalid value \"99999999999999999999\" for flag -p: value out of range\nRun 'softirdma pingpong -h' for its flags.\n" {
		t.Errorf("unparsable -p: exit %d, %q", code, errOut)
	}
}

// TestFlagChecks: the helpers the commands (demo too) check their numbers with.
func TestFlagChecks(t *testing.T) {
	var b bytes.Buffer
	if checkFlags(&b, "demo", floatRange("loss", 0.5, 0, 0.5), intRange("n", 1, 1, 1), oneOf("m", 512, 256, 512), atLeast("t", 0, 0)) != 0 || b.Len() != 0 {
		t.Fatalf("good values refused: %q", b.String())
	}
	if checkFlags(&b, "demo", floatRange("loss", 0.6, 0, 0.5), intRange("n", 0, 1, 2)) != 2 || b.String() != "softirdma demo: -loss 0.6 is out of range (0..0.5)\n" {
		t.Fatalf("got %q", b.String())
	}
}

// TestHelp: 'softirdma help X' prints X's help on stdout, 'X -h' on stderr, for every command.
func TestHelp(t *testing.T) {
	for name := range commands {
		code, out, errOut := runCLI("help", name)
		if code != 0 || !strings.HasPrefix(out, "usage: softirdma "+name) || errOut != "" || len(strings.Split(out, "\n")) < 3 {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
		code, out, errOut = runCLI(name, "-h")
		if code != 0 || !strings.HasPrefix(errOut, "usage: softirdma "+name) || out != "" {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
}

// TestPeerUsageMessages: what is missing is named, with an example.
func TestPeerUsageMessages(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "-server"}, "softirdma pingpong: no link: give -link, " + linkExample + "\n"},
		{[]string{"perf", "write", "-server"}, "softirdma perf: no link: give -link, " + linkExample + "\n"},
		{[]string{"pingpong", "-server", "-link", "dgram:127.0.0.1:9,127.0.0.1:9"},
			"softirdma pingpong: no -ip: give softirdma's IPv4 address on the link, its RoCE GID, e.g. -ip 192.168.77.1\n"},
		{[]string{"pingpong", "-server", "-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "x"},
			"softirdma pingpong: -ip \"x\" is not an IPv4 address: give softirdma's own unicast IPv4 address on the link, e.g. -ip 192.168.77.1\n"},
		{[]string{"pingpong", "-server", "-link", "udp:1"}, "softirdma pingpong: -link \"udp:1\": the kinds are dgram, stream and afpacket, " + linkExample + "\n"},
		{[]string{"pingpong", "-link", "dgram:127.0.0.1:9,127.0.0.1:9"}, "softirdma pingpong: give a server's host name, or -server\n"},
	} {
		if code, _, errOut := runCLI(c.args...); code != 2 || errOut != c.want {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, errOut, c.want)
		}
	}
}

// perf's test word may stand anywhere among its flags, before or after the host; what is
// missing or doubled is named.
func TestPerfTestWordAnywhere(t *testing.T) {
	link := []string{"-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1"}
	noLink := "softirdma perf: no link: give -link, " + linkExample + "\n"
	usage := " (softirdma perf write|read|atomic|send|send_lat [-server | HOST] [flags])\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-server", "write"}, noLink},
		{[]string{"-server", "-n", "10", "read"}, noLink},
		{[]string{"-server", "atomic", "-s", "8"}, noLink},
		{[]string{"127.0.0.1", "send"}, noLink},
		{append([]string{"-server", "-x", "2", "write"}, link...), "softirdma perf: -x 2 is out of range (0..1)\n"},
		{append([]string{"-s", "16", "-server", "atomic"}, link...), "softirdma perf: -s 16 is out of range (atomic messages are always 8 bytes)\n"},
		{[]string{"-server"}, "softirdma perf: no test given: write, read, atomic, send or send_lat" + usage},
		{[]string{"-server", "bogus"}, `softirdma perf: no test "bogus": write, read, atomic, send or send_lat` + usage},
		{[]string{"127.0.0.1", "192.0.2.9"}, `softirdma perf: no test among "127.0.0.1" and "192.0.2.9": write, read, atomic, send or send_lat` + usage},
		{[]string{"write", "read"}, `softirdma perf: one test at a time, got "write" and "read"` + usage},
		{append([]string{"-server", "-R", "send_lat"}, link...), "softirdma perf: -R runs the bandwidth tests (send_lat exchanges over TCP)\n"},
		{append([]string{"-server", "-c", "UD", "send_lat"}, link...), "softirdma perf: -c UD: send_lat runs on RC here (UD latency is not supported)\n"},
		{[]string{"write", "127.0.0.1", "192.0.2.9"}, `softirdma perf: more than one host: "127.0.0.1" and "192.0.2.9"` + usage},
	} {
		code, out, errOut := runCLI(append([]string{"perf"}, c.args...)...)
		if code != 2 || out != "" || errOut != c.want {
			t.Errorf("perf %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// Every command that takes softirdma's own address (-ip, and serve's -function ip=) refuses one
// no NIC can have on a link, with one line saying what the address is.
func TestOwnAddressChecked(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ ip, shown, what string }{
		{"x", `"x"`, "is not an IPv4 address"},
		{"192.0.2.300", `"192.0.2.300"`, "is not an IPv4 address"},
		{"0.0.0.0", "0.0.0.0", "is the unspecified address"},
		{"0.1.2.3", "0.1.2.3", "is in 0.0.0.0/8, which names this network and no host"},
		{"255.255.255.255", "255.255.255.255", "is the broadcast address"},
		{"224.0.0.1", "224.0.0.1", "is a multicast address (224.0.0.0/4)"},
		{"239.1.2.3", "239.1.2.3", "is a multicast address (224.0.0.0/4)"},
		{"240.0.0.1", "240.0.0.1", "is reserved (240.0.0.0/4)"},
		{"127.0.0.1", "127.0.0.1", "is a loopback address (127.0.0.0/8), which never crosses a link"},
		{"fe80::1", "fe80::1", "is an IPv6 address; softirdma's IPv6 GID is the link-local address its MAC gives"},
		{"::ffff:192.0.2.1", "::ffff:192.0.2.1", "is an IPv4-mapped IPv6 address: write it 192.0.2.1"},
	} {
		link := "dgram:127.0.0.1:9,127.0.0.1:9"
		for _, args := range [][]string{
			{"pingpong", "-server"}, {"perf", "write", "-server"}, {"rping", "-s", "-a", "192.0.2.1"},
			{"ucmatose"}, {"udaddy"}, {"serve", "-socket", filepath.Join(dir, "no", "s.sock")},
		} {
			args = append(args, "-link", link, "-ip", c.ip)
			if args[0] != "serve" {
				args = append(args, "-timeout", "1s") // a command that took the address would not wait long
			}
			if args[0] == "serve" && c.ip == "x" {
				args = append(args[:len(args)-4], "-ip", c.ip) // also without a link
			}
			want := fmt.Sprintf("softirdma %s: -ip %s %s: give softirdma's own unicast IPv4 address on the link, e.g. -ip 192.168.77.1\n", args[0], c.shown, c.what)
			if code, out, errOut := runCLI(args...); code != 2 || out != "" || errOut != want {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errOut, want)
			}
		}
		fn := "name=a,socket=" + filepath.Join(dir, "a.sock") + ",ip=" + c.ip
		want := fmt.Sprintf("function a: ip=%s %s: give the function's own unicast IPv4 address, e.g. ip=192.168.77.1\n", c.shown, c.what)
		// The control socket's directory does not exist: a serve that took the address stops there.
		if code, out, errOut := runCLI("serve", "-function", fn, "-control", filepath.Join(dir, "no", "ctl.sock")); code != 2 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("-function %s: exit %d, stdout %q, stderr %q; want 2 and %q", fn, code, out, errOut, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("made %v before refusing", ents)
	}
}

// rping's server listens on -a, which must be its own -ip, as its help says: another address is
// refused, naming both.
func TestRpingServerAddress(t *testing.T) {
	link := []string{"-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1", "-timeout", "1s"}
	code, out, errOut := runCLI(append([]string{"rping", "-s", "-a", "192.0.2.9"}, link...)...)
	want := "softirdma rping: -s -a 192.0.2.9: a server listens on its own address, and -ip is 192.0.2.1: give -a 192.0.2.1 (or -ip 192.0.2.9)\n"
	if code != 2 || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
	}
}

// peerArgs is a peer's link on its own UDP socket, to nobody.
func peerArgs(t *testing.T, args ...string) []string {
	return append(args, "-link", "dgram:"+freeUDP(t)+","+freeUDP(t), "-ip", "192.0.2.2")
}

// TestPeerUnreachable: a client with nobody to talk to says so at once, and -wait keeps it
// trying, saying so once.
func TestPeerUnreachable(t *testing.T) {
	port := fmt.Sprint(freeTCPPort(t))
	for _, cmd := range [][]string{{"pingpong"}, {"perf", "write"}} {
		start := time.Now()
		code, _, errOut := runCLI(peerArgs(t, append(cmd, "127.0.0.1", "-p", port)...)...)
		want := fmt.Sprintf("softirdma %s: couldn't connect to 127.0.0.1:%s: connection refused (start the server first, or keep trying with -wait 30s)\n", cmd[0], port)
		if code != 1 || errOut != want || time.Since(start) > 5*time.Second {
			t.Errorf("%v: exit %d after %v, %q; want %q", cmd, code, time.Since(start), errOut, want)
		}
	}
	code, _, errOut := runCLI(peerArgs(t, "pingpong", "nosuch.invalid", "-p", port)...)
	if want := fmt.Sprintf("softirdma pingpong: couldn't connect to nosuch.invalid:%s: no such host\n", port); code != 1 || errOut != want {
		t.Errorf("unresolvable: exit %d, %q; want %q", code, errOut, want)
	}
	start := time.Now()
	code, _, errOut = runCLI(peerArgs(t, "perf", "send", "127.0.0.1", "-p", port, "-wait", "500ms")...)
	want := fmt.Sprintf("softirdma perf: waiting up to 500ms for the server at 127.0.0.1:%s (connection refused)\n"+
		"softirdma perf: couldn't connect to 127.0.0.1:%s: connection refused\n", port, port)
	if code != 1 || errOut != want || time.Since(start) < 500*time.Millisecond {
		t.Errorf("-wait: exit %d after %v, %q; want %q", code, time.Since(start), errOut, want)
	}
}

// A -timeout shorter than -wait ends the wait; the line says how long it tried, never "0s".
func TestShortTimeoutNeverReadsZero(t *testing.T) {
	port := fmt.Sprint(freeTCPPort(t))
	within := regexp.MustCompile(`within [1-9][0-9]*(µs|ms|s)\n$`)
	for _, cmd := range [][]string{{"pingpong", "127.0.0.1", "-wait", "10s"}, {"perf", "write", "127.0.0.1", "-wait", "10s"},
		{"pingpong", "-server"}, {"perf", "write", "-server"}} {
		code, _, errOut := runCLI(peerArgs(t, append(cmd, "-p", port, "-timeout", "1ms")...)...)
		if code != 1 || !within.MatchString(errOut) {
			t.Errorf("%v -timeout 1ms: exit %d, %q", cmd, code, errOut)
		}
	}
}

// TestServerStrayAndTimeout: a server drops a connection that sends nothing, says so on
// stderr, goes on waiting, and at its timeout says nobody came.
func TestServerStrayAndTimeout(t *testing.T) {
	for _, cmd := range [][]string{{"pingpong"}, {"perf", "read"}} {
		port := fmt.Sprint(freeTCPPort(t))
		var out bytes.Buffer
		errOut := &lockedBuffer{}
		done := make(chan int)
		go func() {
			done <- dispatchWith(peerArgs(t, append(cmd, "-server", "-p", port, "-timeout", "2s")...), &out, errOut, peerRun{idle: 200 * time.Millisecond})
		}()
		for deadline := time.Now().Add(5 * time.Second); ; { // until the server listens
			c, err := net.Dial("tcp", "127.0.0.1:"+port)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		code := <-done
		lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
		if code != 1 || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "softirdma "+cmd[0]+": dropped a connection from 127.0.0.1:") ||
			!strings.HasSuffix(lines[0], ": it closed without sending anything; still waiting for a client") ||
			lines[1] != "softirdma "+cmd[0]+": no client connected within 2s (1 connection(s) dropped)" {
			t.Errorf("%v: exit %d\n%s", cmd, code, errOut.String())
		}
	}
}

type lockedBuffer = lockedbuf.Buffer

// TestPerfSendMismatch: ib_send_bw's sides do not exchange -n; with different ones both end,
// the server saying what to fix.
func TestPerfSendMismatch(t *testing.T) {
	s, c := runPair(t, []string{"perf", "send", "-server", "-n", "100", "-s", "1024"}, []string{"perf", "send", "127.0.0.1", "-n", "40", "-s", "1024"})
	want := "softirdma perf: the client finished after sending 40 of the 100 messages this side expects: give both sides the same -n\n"
	if s.code != 1 || s.err != want || c.code != 1 {
		t.Fatalf("server %d: %q\nclient %d: %q", s.code, s.err, c.code, c.err)
	}
}

// TestDoctorNoIPv4: an adapter without IPv4 gets what to do, not "invalid IP".
func TestDoctorNoIPv4(t *testing.T) {
	var out bytes.Buffer
	n := doctorAdapter(&out, afpacket.Adapter{Name: "eth9", Index: 1 << 30, MTU: 1500, Up: true}, nil)
	want := "  FIX  no IPv4 address, which softirdma needs for its GID: add one with 'ip addr add 192.0.2.1/24 dev eth9' (an address of the adapter's network)\n"
	if n < 1 || !strings.Contains(out.String(), want) || strings.Contains(out.String(), "invalid IP") {
		t.Fatalf("%d problems:\n%s", n, out.String())
	}
}

// Usage mistakes are refused in one line that names what is wrong, before anything is opened:
// two captures to decode, -server with a host name, -for without -watch, an adapter doctor cannot
// find, a MAC no NIC can have.
func TestUsageMistakesNamed(t *testing.T) {
	// -timeout: a command that took the mistake would not wait long.
	link := []string{"-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1", "-timeout", "1s"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"decode", "a.pcap", "b.pcap"}, 2, "softirdma decode: one capture at a time, got 2: [\"a.pcap\" \"b.pcap\"]\n"},
		{[]string{"decode", "-flows"}, 2, "softirdma decode: no capture given: name a pcap or pcapng file, or - for standard input\n"},
		{append([]string{"pingpong", "-server", "192.0.2.9"}, link...), 2,
			"softirdma pingpong: -server and a host name (\"192.0.2.9\") both given: a server listens on every address and takes no host name; a client takes one and no -server\n"},
		{append([]string{"perf", "write", "192.0.2.9", "-server"}, link...), 2,
			"softirdma perf: -server and a host name (\"192.0.2.9\") both given: a server listens on every address and takes no host name; a client takes one and no -server\n"},
		{[]string{"links", "-for", "5s"}, 2, "softirdma links: -for bounds -watch ADAPTER and means nothing without it: add -watch, or drop -for\n"},
		{[]string{"doctor", "no-such-adapter"}, 1, "softirdma doctor: no adapter named \"no-such-adapter\" ('softirdma links' lists the machine's adapters)\n"},
		{append([]string{"pingpong", "-server", "-mac", "ff:ff:ff:ff:ff:ff"}, link...), 2,
			"softirdma pingpong: -mac ff:ff:ff:ff:ff:ff is a multicast or broadcast address: a NIC's own MAC is unicast (an even first byte), e.g. -mac 02:00:00:00:00:01\n"},
		{append([]string{"perf", "read", "-server", "-mac", "01:00:5e:00:00:01"}, link...), 2,
			"softirdma perf: -mac 01:00:5e:00:00:01 is a multicast or broadcast address: a NIC's own MAC is unicast (an even first byte), e.g. -mac 02:00:00:00:00:01\n"},
		{[]string{"serve", "-socket", "/nonexistent/s.sock", "-mac", "33:33:00:00:00:01"}, 2,
			"softirdma serve: -mac 33:33:00:00:00:01 is a multicast or broadcast address: a NIC's own MAC is unicast (an even first byte), e.g. -mac 02:00:00:00:00:01\n"},
		{append([]string{"pingpong", "-server", "-mac", "00:00:00:00:00:00"}, link...), 2,
			"softirdma pingpong: -mac 00:00:00:00:00:00 is the zero address, which no NIC has: e.g. -mac 02:00:00:00:00:01\n"},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != c.code || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}

// -0 is 0: the demo prints "loss 0", and a range check would print 0, not "-0".
func TestNegativeZero(t *testing.T) {
	code, out, _ := runCLI("demo", "-loss", "-0")
	if code != 0 || !strings.Contains(out, ", loss 0:") {
		t.Fatalf("demo -loss -0: exit %d\n%s", code, out)
	}
	fs := newFlagSet("x", io.Discard)
	v := fs.Float64("v", 1, "")
	if _, done := parseFlags(fs, []string{"-v", "-0"}); done || *v != 0 || math.Signbit(*v) {
		t.Fatalf("-v -0 parsed as %v (sign bit %v)", *v, math.Signbit(*v))
	}
	var b bytes.Buffer
	if checkFlags(&b, "x", floatRange("v", *v, 0.1, 1)) != 2 || b.String() != "softirdma x: -v 0 is out of range (0.1..1)\n" {
		t.Fatalf("got %q", b.String())
	}
}
