package main

import (
	"strings"
	"testing"
)

// TestCMToolCommands runs ucmatose's and udaddy's two sides as commands against each other over
// dgram links: four connections, and the client keeps trying until the server listens.
func TestCMToolCommands(t *testing.T) {
	pcap := t.TempDir() + "/cm.pcap"
	for _, c := range []struct {
		tool           string
		server, client string // what each prints last
	}{
		{"ucmatose", "cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n", "sending replies\ndata transfers complete\ntest complete\nreturn status 0\n"},
		{"udaddy", "sending replies\ndata transfers complete\ntest complete\nreturn status 0\n", "receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"},
	} {
		s, cl := runLinked(t, []string{c.tool, "-c", "4", "-timeout", "30s", "-ip", "192.0.2.1", "-mac", "02:00:00:00:00:01", "-pcap", pcap},
			[]string{c.tool, "-s", "192.0.2.1", "-c", "4", "-wait", "20s", "-timeout", "30s", "-ip", "192.0.2.2", "-mac", "02:00:00:00:00:02"})
		if s.code != 0 || cl.code != 0 || !strings.HasSuffix(s.out, c.server) || !strings.HasSuffix(cl.out, c.client) {
			t.Fatalf("%s: server %d: %s%s\nclient %d: %s%s", c.tool, s.code, s.out, s.err, cl.code, cl.out, cl.err)
		}
		// The CM messages are named in the server's capture, and nothing in it is malformed.
		code, out, _ := runCLI("decode", pcap)
		want := map[string]string{"ucmatose": "cm=RTU", "udaddy": "cm=SIDR_REP"}[c.tool]
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "icrc_bad=0 malformed=0") {
			t.Fatalf("%s: decode %d:\n%s", c.tool, code, out)
		}
	}
	for _, bad := range [][]string{{"ucmatose", "-c", "0"}, {"ucmatose", "-S", "-1"}, {"udaddy", "-C", "20000"}, {"udaddy", "-S", "5000"}, {"ucmatose", "-s", "nowhere"}} {
		if code, _, errOut := runCLI(append(bad, "-link", "dgram:127.0.0.1:9,127.0.0.1:9", "-ip", "192.0.2.1")...); code != 2 || !strings.HasPrefix(errOut, "softirdma "+bad[0]+": -") {
			t.Errorf("%v: exit %d, %q", bad, code, errOut)
		}
	}
}

// A client of rping, ucmatose or udaddy aimed at its own address, or at one nothing on the link
// answers for, is told which, not "INVALID_SERVICE_ID" or "create_ah: no link address".
func TestCMClientAddressNamed(t *testing.T) {
	for _, tool := range [][]string{{"rping", "-c", "-a"}, {"ucmatose", "-s"}, {"udaddy", "-s"}} {
		for _, c := range []struct{ addr, want string }{
			{"192.0.2.1", "192.0.2.1 is this device's own address: a client connects to a server elsewhere on the link (the server's -ip), not to itself"},
			{"fe80::ff:fe00:1", "fe80::ff:fe00:1 is this device's own address: a client connects to a server elsewhere on the link (the server's -ip), not to itself"},
			{"192.0.2.7", "no route/neighbour to 192.0.2.7 on the link: nothing on it answers for that address (is the peer up, is -link right?)"},
		} {
			args := append(append([]string(nil), tool...), c.addr, "-timeout", "10s", "-ip", "192.0.2.1", "-mac", "02:00:00:00:00:01",
				"-link", "dgram:"+freeUDP(t)+","+freeUDP(t))
			code, _, errOut := runCLI(args...)
			if want := "softirdma " + tool[0] + ": " + c.want + "\n"; code != 1 || errOut != want {
				t.Errorf("%q: exit %d, %q; want 1 and %q", args, code, errOut, want)
			}
		}
	}
}
