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
	pcap := t.TempDir() + "/pp.pcap"
	s, c := runPair(t, []string{"pingpong", "-server", "-n", "50", "-g", "0", "-pcap", pcap, "-u", "18", "-retry", "3"},
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

// TestPerfCommand runs softirdma perf against itself, as ib_read_bw's two ends would run.
func TestPerfCommand(t *testing.T) {
	qps := recordQPs(t)
	s, c := runPair(t, []string{"perf", "read", "-server", "-n", "200", "-s", "8192"},
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

type cliRun struct {
	code       int
	out, err   string
	bout, berr bytes.Buffer
}

// runPair runs a server and a client command in this process, each on its own dgram link wired
// to the other's the way QEMU's -netdev dgram wires a guest, with a fresh exchange port; the
// client waits for the server to listen.
func runPair(t *testing.T, server, client []string) (s, c *cliRun) {
	a, b := freeUDP(t), freeUDP(t)
	port := fmt.Sprint(freeTCPPort(t))
	s, c = new(cliRun), new(cliRun)
	server = append(server, "-p", port, "-timeout", "30s", "-link", "dgram:"+a+","+b, "-ip", "192.0.2.1", "-mac", "02:00:00:00:00:01")
	client = append(client, "-p", port, "-timeout", "30s", "-link", "dgram:"+b+","+a, "-ip", "192.0.2.2", "-mac", "02:00:00:00:00:02", "-wait", "20s")
	var wg sync.WaitGroup
	wg.Add(2)
	for _, r := range []struct {
		run  *cliRun
		args []string
	}{{s, server}, {c, client}} {
		go func() {
			defer wg.Done()
			r.run.code = dispatch(r.args, &r.run.bout, &r.run.berr)
			r.run.out, r.run.err = r.run.bout.String(), r.run.berr.String()
		}()
	}
	wg.Wait()
	return s, c
}
