package main

import (
	"bytes"
	"fmt"
	"github.com/softirdma/softirdma/wire"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
)

func freeUDP(t *testing.T) string {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func freeTCPPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPingpongCommand runs the command twice in one process: a server and a client, each with
// its own dgram link, wired to each other the way QEMU's -netdev dgram wires a guest.
func TestPingpongCommand(t *testing.T) {
	run, qps := recordQPs()
	pcap := t.TempDir() + "/pp.pcap"
	s, c := runPairWith(t, run, []string{"pingpong", "-server", "-n", "50", "-g", "0", "-pcap", pcap, "-u", "18", "-retry", "3"},
		[]string{"pingpong", "127.0.0.1", "-n", "50", "-g", "0", "-loss", "0.02", "-u", "18", "-retry", "3"})
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
	}
	for _, out := range []string{s.out, c.out} {
		if !strings.Contains(out, "409600 bytes in") || !strings.Contains(out, "50 iters in") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if code, out, _ := runCLI("decode", pcap); code != 0 || !strings.Contains(out, "icrc_bad=0 malformed=0") {
		t.Fatalf("decode of the pingpong capture: %d\n%s", code, out)
	}
	// -u and -retry reach both QPs.
	if got := qps(); len(got) != 2 || got[0].Timeout != 18 || got[0].RetryCnt != 3 || got[1].Timeout != 18 || got[1].RetryCnt != 3 {
		t.Fatalf("QP attributes %+v", got)
	}
	if code, _, _ := runCLI("pingpong", "-link", "dgram:x"); code != 2 {
		t.Fatalf("bad usage: exit %d", code)
	}
}

// TestPingpongTransports runs the UC and UD tools' exchange and traffic between two commands, and
// the UD run's datagrams decode as one QP pair each way with ibv_ud_pingpong's Q_Key.
func TestPingpongTransports(t *testing.T) {
	for _, tr := range []string{"UC", "ud"} {
		t.Run(tr, func(t *testing.T) {
			pcap := t.TempDir() + "/pp.pcap"
			s, c := runPair(t, []string{"pingpong", "-server", "-transport", tr, "-n", "20", "-pcap", pcap},
				[]string{"pingpong", "127.0.0.1", "-transport", tr, "-n", "20"})
			if s.code != 0 || c.code != 0 {
				t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
			}
			size := map[string]int{"UC": 4096, "ud": 1024}[tr] // the tools' defaults
			for _, out := range []string{s.out, c.out} {
				if !strings.Contains(out, fmt.Sprintf("%d bytes in", size*20*2)) {
					t.Fatalf("output:\n%s", out)
				}
			}
			code, out, _ := runCLI("decode", "-flows", pcap)
			if code != 0 || !strings.Contains(out, "icrc_bad=0 malformed=0") {
				t.Fatalf("decode: %d\n%s", code, out)
			}
			want := map[string]string{"UC": "flows: 2 UC streams", "ud": "flows: 2 UD QP pairs"}[tr]
			if !strings.Contains(out, want) || tr == "ud" && !strings.Contains(out, "qkeys=0x11111111") {
				t.Fatalf("decode -flows lacks %q:\n%s", want, out)
			}
			// Both ends' frames carry TTL 64, the route's hop limit, as rxe's do, whatever the
			// tools' address vectors say.
			frames := readPackets(t, pcap)
			if len(frames) == 0 {
				t.Fatal("no frames")
			}
			var p wire.Parser
			var fr wire.Frame
			for n, f := range frames {
				data := f.data
				if p.Parse(&fr, data) == nil && !fr.IPv6 && data[fr.L3+8] != 64 {
					t.Fatalf("frame %d from %s with TTL %d", n, fr.SrcIP(), data[fr.L3+8])
				}
			}
		})
	}
	if code, _, errOut := runCLI("pingpong", "-transport", "XRC", "-server", "-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1"); code != 2 || !strings.Contains(errOut, "-transport") {
		t.Fatalf("-transport XRC: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCLI("pingpong", "-transport", "UD", "-s", "2048", "-server", "-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1"); code == 0 || !strings.Contains(errOut, "larger than port MTU (1024)") {
		t.Fatalf("UD -s 2048 on a 1500-byte link: exit %d, %s", code, errOut)
	}
}

// TestPerfSendUD runs softirdma perf send -c UD against itself, as ib_send_bw -c UD's two ends
// would: the size defaults to the MTU the exchange agrees on (1024 on these links).
func TestPerfSendUD(t *testing.T) {
	s, c := runPair(t, []string{"perf", "send", "-c", "UD", "-server", "-n", "200"}, []string{"perf", "send", "-c", "UD", "127.0.0.1", "-n", "200"})
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
	}
	for _, out := range []string{s.out, c.out} {
		if !strings.Contains(out, " Connection type : UD") || !strings.Contains(out, " 1024       200 ") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if !strings.Contains(s.err+c.err, " Max msg size in UD is MTU 1024") {
		t.Fatalf("no note of the size taken from the MTU:\n%s\n%s", s.err, c.err)
	}
	if code, _, errOut := runCLI("perf", "write", "-c", "UD", "-server", "-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1"); code != 2 || !strings.Contains(errOut, "only possible in SEND") {
		t.Fatalf("perf write -c UD: exit %d, %s", code, errOut)
	}
}

// TestPerfWriteSendWindowUnderLoss: perf write with a window of 1,024 against a server that
// loses 1% of what it receives completes every WRITE on both ends, as at rxe's window.
func TestPerfWriteSendWindowUnderLoss(t *testing.T) {
	s, c := runPair(t, []string{"perf", "write", "-server", "-n", "200", "-s", "65536", "-loss", "0.01"},
		[]string{"perf", "write", "127.0.0.1", "-n", "200", "-s", "65536", "-send-window", "1024"})
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
	}
	for _, out := range []string{s.out, c.out} {
		if !strings.Contains(out, " 65536      200 ") {
			t.Fatalf("output:\n%s", out)
		}
	}
}

func TestActiveMTU(t *testing.T) {
	for eth, want := range map[int]int{1500: 1024, 9000: 4096, 4200: 4096, 2200: 2048, 1100: 512, 300: 256, 0: 256} {
		if got := activeMTU(eth).Bytes(); got != want {
			t.Errorf("Ethernet MTU %d: active MTU %d, want %d", eth, got, want)
		}
	}
}

// TestPerfCommand runs softirdma perf against itself, as ib_read_bw's two ends would run.
func TestPerfCommand(t *testing.T) {
	run, qps := recordQPs()
	s, c := runPairWith(t, run, []string{"perf", "read", "-server", "-n", "200", "-s", "8192"},
		[]string{"perf", "read", "127.0.0.1", "-n", "200", "-s", "8192", "-u", "20", "-retry", "2"})
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
	}
	for _, out := range []string{s.out, c.out} {
		if !strings.Contains(out, "RDMA_Read BW Test") || !strings.Contains(out, " 8192       200 ") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if code, _, _ := runCLI("perf", "frobnicate"); code != 2 {
		t.Fatalf("unknown test: exit %d", code)
	}
	// -u and -retry reach the client's QP, the one perftest moves to RTS.
	var client bool
	for _, qp := range qps() {
		client = client || qp.State == emu.QPSRTS && qp.Timeout == 20 && qp.RetryCnt == 2
	}
	if !client {
		t.Fatalf("QP attributes %+v", qps())
	}
}

// recordQPs gives the peers' runs an option that collects the attributes of the QPs they connect,
// and what it collected.
func recordQPs() (peerRun, func() []emu.QPAttr) {
	var mu sync.Mutex
	var qps []emu.QPAttr
	run := peerRun{ran: func(a emu.QPAttr) {
		mu.Lock()
		defer mu.Unlock()
		qps = append(qps, a)
	}}
	return run, func() []emu.QPAttr {
		mu.Lock()
		defer mu.Unlock()
		return append([]emu.QPAttr(nil), qps...)
	}
}

// dispatchWith is dispatch with the peers of rdma-core's tools run with run.
func dispatchWith(args []string, stdout, stderr io.Writer, run peerRun) int {
	if cmd, ok := peers[args[0]]; ok {
		return cmd(args[1:], stdout, stderr, run)
	}
	return dispatch(args, stdout, stderr)
}

type cliRun struct {
	code       int
	out, err   string
	bout, berr bytes.Buffer
}

// runPair runs a server and a client command in this process, each on its own dgram link wired
// to the other's the way QEMU's -netdev dgram wires a guest, with a fresh exchange port; the
// client waits for the server to listen.
func runPair(t *testing.T, server, client []string) (s, c *cliRun) {
	return runPairWith(t, peerRun{}, server, client)
}

// runPairWith is runPair with the peers of rdma-core's tools run with run.
func runPairWith(t *testing.T, run peerRun, server, client []string) (s, c *cliRun) {
	port := fmt.Sprint(freeTCPPort(t))
	return runLinkedWith(t, run, append(server, "-timeout", "30s", "-ip", "192.0.2.1", "-mac", "02:00:00:00:00:01", "-p", port),
		append(client, "-timeout", "30s", "-ip", "192.0.2.2", "-mac", "02:00:00:00:00:02", "-p", port, "-wait", "20s"))
}

// runPairOn is runPair with the addresses and the timeout left to the caller.
func runPairOn(t *testing.T, server, client []string) (s, c *cliRun) {
	port := fmt.Sprint(freeTCPPort(t))
	return runLinked(t, append(server, "-p", port), append(client, "-p", port, "-wait", "20s"))
}

// runLinked runs two commands in one process, each with its own dgram link, wired to each other.
func runLinked(t *testing.T, server, client []string) (s, c *cliRun) {
	return runLinkedWith(t, peerRun{}, server, client)
}

// runLinkedWith is runLinked with the peers of rdma-core's tools run with run.
func runLinkedWith(t *testing.T, run peerRun, server, client []string) (s, c *cliRun) {
	a, b := freeUDP(t), freeUDP(t)
	s, c = new(cliRun), new(cliRun)
	server = append(server, "-link", "dgram:"+a+","+b)
	client = append(client, "-link", "dgram:"+b+","+a)
	var wg sync.WaitGroup
	wg.Add(2)
	for _, r := range []struct {
		run  *cliRun
		args []string
	}{{s, server}, {c, client}} {
		go func() {
			defer wg.Done()
			r.run.code = dispatchWith(r.args, &r.run.bout, &r.run.berr, run)
			r.run.out, r.run.err = r.run.bout.String(), r.run.berr.String()
		}()
	}
	wg.Wait()
	return s, c
}

// Two processes on one machine with IPv6 GIDs (-g 0, -x 0) and no -mac: each MAC, and so each
// link-local GID, comes from its -ip, and they talk.
func TestTwoProcessesIPv6GIDs(t *testing.T) {
	for _, cmd := range [][]string{{"pingpong", "-n", "20", "-g", "0"}, {"perf", "write", "-n", "20", "-s", "4096", "-x", "0"}} {
		server := append([]string{cmd[0]}, cmd[1:]...)
		if cmd[0] == "perf" {
			server = []string{"perf", "write", "-server", "-n", "20", "-s", "4096", "-x", "0"}
		} else {
			server = append(server, "-server")
		}
		client := append(append([]string(nil), cmd...), "127.0.0.1")
		s, c := runPairOn(t, append(server, "-timeout", "10s", "-ip", "192.0.2.1"), append(client, "-timeout", "10s", "-ip", "192.0.2.2"))
		if s.code != 0 || c.code != 0 {
			t.Fatalf("%s: server %d: %s%s\nclient %d: %s%s", cmd[0], s.code, s.out, s.err, c.code, c.out, c.err)
		}
		a, b := "fe80::c0ff:fe00:201", "fe80::c0ff:fe00:202" // EUI-64 of 02:00:c0:00:02:01 and :02
		if cmd[0] == "perf" {
			a, b = "254:128:00:00:00:00:00:00:00:00:192:255:254:00:02:01", "254:128:00:00:00:00:00:00:00:00:192:255:254:00:02:02"
		}
		if !strings.Contains(c.out, a) || !strings.Contains(c.out, b) {
			t.Fatalf("%s: GIDs not derived from -ip:\n%s\n%s", cmd[0], s.out, c.out)
		}
	}
}

// A peer that advertises this side's own GID is refused with one line saying so: frames to it
// would loop back to this device. The server drops that client and goes on waiting.
func TestSameGIDRefused(t *testing.T) {
	for _, tc := range []struct {
		server, client []string
		same           []string // the flags that make the GIDs equal
	}{
		{[]string{"pingpong", "-server", "-n", "5", "-g", "0"}, []string{"pingpong", "127.0.0.1", "-n", "5", "-g", "0"}, []string{"-ip", "192.0.2.1"}},
		{[]string{"pingpong", "-server", "-n", "5"}, []string{"pingpong", "127.0.0.1", "-n", "5"}, []string{"-ip", "192.0.2.1"}},
		{[]string{"pingpong", "-server", "-n", "5", "-g", "0"}, []string{"pingpong", "127.0.0.1", "-n", "5", "-g", "0"}, []string{"-ip", "192.0.2.1", "-mac", "02:00:00:00:00:01"}},
		{[]string{"perf", "write", "-server", "-n", "5", "-x", "0"}, []string{"perf", "write", "127.0.0.1", "-n", "5", "-x", "0"}, []string{"-ip", "192.0.2.1"}},
	} {
		s, c := runPairOn(t, append(append(tc.server, "-timeout", "3s"), tc.same...), append(append(tc.client, "-timeout", "10s"), tc.same...))
		want := "is this side's own, so frames to it would loop back here: give each side its own address (-ip; for the IPv6 GID, -mac)"
		lines := strings.Split(strings.TrimSuffix(c.err, "\n"), "\n")
		last := lines[len(lines)-1] // after any line about waiting for the server
		if c.code != 1 || !strings.HasPrefix(last, "softirdma "+tc.client[0]+": the peer's GID ") || !strings.HasSuffix(last, want) {
			t.Errorf("%v %v: client exit %d, stderr %q", tc.client, tc.same, c.code, c.err)
		}
		if s.code != 1 || !strings.Contains(s.err, "dropped a connection from") || !strings.Contains(s.err, "is this side's own") {
			t.Errorf("%v %v: server exit %d, stderr %q", tc.server, tc.same, s.code, s.err)
		}
	}
}

// The default MAC comes from -ip: locally administered, unicast, distinct per address.
func TestDefaultMAC(t *testing.T) {
	for ip, want := range map[string][6]byte{
		"192.168.77.1":    {2, 0, 192, 168, 77, 1},
		"192.0.2.2":       {2, 0, 192, 0, 2, 2},
		"::ffff:10.0.0.9": {2, 0, 10, 0, 0, 9},
		"fd00::1:2":       {2, 0, 0, 1, 0, 2},
	} {
		l := linkFlags{ip: ip}
		if got, err := l.macAddr(); err != nil || got != want {
			t.Errorf("-ip %s: MAC %x, %v; want %x", ip, got, err, want)
		}
	}
	l := linkFlags{ip: "192.0.2.1", mac: "02:00:00:00:00:07"}
	if got, err := l.macAddr(); err != nil || got != [6]byte{2, 0, 0, 0, 0, 7} {
		t.Errorf("-mac given: %x, %v", got, err)
	}
}

// A perf server killed while the client runs is reported as gone, not as a flag to check.
func TestPerfServerKilled(t *testing.T) {
	a, b := freeUDP(t), freeUDP(t)
	port := fmt.Sprint(freeTCPPort(t))
	server := exec.Command(os.Args[0], "perf", "write", "-server", "-p", port, "-link", "dgram:"+a+","+b, "-ip", "192.0.2.1", "-timeout", "60s")
	server.Env = append(os.Environ(), "SOFTIRDMA_TEST_MAIN=1")
	var sout lockedBuffer
	server.Stdout = &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var out, errs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch([]string{"perf", "write", "127.0.0.1", "-n", "100000000", "-s", "1024", "-p", port, "-link", "dgram:" + b + "," + a,
			"-ip", "192.0.2.2", "-wait", "20s", "-timeout", "60s"}, &out, &errs)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "#bytes"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the test did not start:\n%s%s", out.String(), errs.String())
		}
	}
	time.Sleep(100 * time.Millisecond)
	server.Process.Kill()
	server.Wait()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not notice")
	}
	const want = "its control connection closed"
	if e := errs.String(); code != 1 || !strings.HasPrefix(e[strings.LastIndex(strings.TrimSuffix(e, "\n"), "\n")+1:], "softirdma perf: the server went away after ") ||
		!strings.Contains(e, want) || strings.Contains(e, "-n") {
		t.Fatalf("exit %d, stderr %q", code, e)
	}
}

// TestRpingCommand runs softirdma rping against itself, as rping's two ends would: ten pings
// through a connection rdma_cm set up, printed on both ends and validated by the client.
func TestRpingCommand(t *testing.T) {
	pcap := t.TempDir() + "/rping.pcap"
	s, c := runPair(t, []string{"rping", "-s", "-a", "192.0.2.1", "-v", "-C", "10", "-pcap", pcap},
		[]string{"rping", "-c", "-a", "192.0.2.1", "-v", "-V", "-C", "10"})
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", s.code, s.out, s.err, c.code, c.out, c.err)
	}
	if strings.Count(s.out, "server ping data: rdma-ping-") != 10 || strings.Count(c.out, "ping data: rdma-ping-") != 10 {
		t.Fatalf("server:\n%s\nclient:\n%s", s.out, c.out)
	}
	code, out, _ := runCLI("decode", pcap)
	for _, want := range []string{"cm=REQ", "(TCP:", "cm=REP", "cm=RTU", "cm=DREQ", "cm=DREP", "icrc_bad=0 malformed=0"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("decode lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	for _, bad := range [][]string{{"rping", "-s", "-c", "-a", "1.2.3.4"}, {"rping", "-c", "-a", "nowhere"}, {"rping", "-c", "-a", "1.2.3.4", "-S", "8"}} {
		if code, _, _ := runCLI(bad...); code != 2 {
			t.Fatalf("%v: exit %d", bad, code)
		}
	}
}

// A server's idle run option reaches the exchange: a connection that stays silent that long is
// dropped, and the server goes on waiting until its timeout.
func TestPeerRunIdle(t *testing.T) {
	for _, cmd := range [][]string{{"pingpong"}, {"perf", "read"}} {
		port := fmt.Sprint(freeTCPPort(t))
		errOut := &lockedBuffer{}
		done := make(chan int)
		go func() {
			done <- dispatchWith(peerArgs(t, append(cmd, "-server", "-p", port, "-timeout", "2s")...), io.Discard, errOut, peerRun{idle: 100 * time.Millisecond})
		}()
		var c net.Conn
		for deadline := time.Now().Add(5 * time.Second); ; { // until the server listens
			var err error
			if c, err = net.Dial("tcp", "127.0.0.1:"+port); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		code := <-done
		c.Close()
		if code != 1 || !strings.Contains(errOut.String(), ": it sent nothing for 100ms; still waiting for a client\n") {
			t.Errorf("%v: exit %d\n%s", cmd, code, errOut.String())
		}
	}
}
