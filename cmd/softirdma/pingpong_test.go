package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

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
	qps := recordQPs(t)
	a, b := freeUDP(t), freeUDP(t)
	port := fmt.Sprint(freeTCPPort(t))
	pcap := t.TempDir() + "/pp.pcap"
	var wg sync.WaitGroup
	var sout, cout, serr, cerr bytes.Buffer
	var scode, ccode int
	wg.Add(2)
	go func() {
		defer wg.Done()
		scode = dispatch([]string{"pingpong", "-server", "-p", port, "-n", "50", "-g", "0", "-timeout", "30s", "-link", "dgram:" + a + "," + b, "-ip", "192.0.2.1",
			"-mac", "02:00:00:00:00:01", "-pcap", pcap, "-u", "18", "-retry", "3"}, &sout, &serr)
	}()
	go func() {
		defer wg.Done()
		ccode = dispatch([]string{"pingpong", "127.0.0.1", "-p", port, "-n", "50", "-g", "0", "-timeout", "30s", "-link", "dgram:" + b + "," + a, "-ip", "192.0.2.2",
			"-mac", "02:00:00:00:00:02", "-loss", "0.02", "-wait", "20s", "-u", "18", "-retry", "3"}, &cout, &cerr)
	}()
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", scode, sout.String(), serr.String(), ccode, cout.String(), cerr.String())
	}
	for _, out := range []string{sout.String(), cout.String()} {
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

// TestPerfCommand runs softirdma perf against itself, as ib_read_bw's two ends would run.
func TestPerfCommand(t *testing.T) {
	qps := recordQPs(t)
	a, b := freeUDP(t), freeUDP(t)
	port := fmt.Sprint(freeTCPPort(t))
	var wg sync.WaitGroup
	var sout, cout, serr, cerr bytes.Buffer
	var scode, ccode int
	wg.Add(2)
	go func() {
		defer wg.Done()
		scode = dispatch([]string{"perf", "read", "-server", "-p", port, "-n", "200", "-s", "8192", "-timeout", "30s", "-link", "dgram:" + a + "," + b, "-ip", "192.0.2.1",
			"-mac", "02:00:00:00:00:01"}, &sout, &serr)
	}()
	go func() {
		defer wg.Done()
		ccode = dispatch([]string{"perf", "read", "127.0.0.1", "-p", port, "-n", "200", "-s", "8192", "-timeout", "30s", "-link", "dgram:" + b + "," + a, "-ip", "192.0.2.2",
			"-mac", "02:00:00:00:00:02", "-wait", "20s", "-u", "20", "-retry", "2"}, &cout, &cerr)
	}()
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d: %s%s\nclient %d: %s%s", scode, sout.String(), serr.String(), ccode, cout.String(), cerr.String())
	}
	for _, out := range []string{sout.String(), cout.String()} {
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

// recordQPs collects the attributes of the QPs the peers connect, until the test ends.
func recordQPs(t *testing.T) func() []emu.QPAttr {
	var mu sync.Mutex
	var qps []emu.QPAttr
	ranPeer = func(a emu.QPAttr) {
		mu.Lock()
		defer mu.Unlock()
		qps = append(qps, a)
	}
	t.Cleanup(func() { ranPeer = nil })
	return func() []emu.QPAttr {
		mu.Lock()
		defer mu.Unlock()
		return append([]emu.QPAttr(nil), qps...)
	}
}
