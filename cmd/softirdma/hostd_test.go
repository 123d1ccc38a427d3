package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

// hostd's link flags are checked before anything starts: the address and its prefix, the MAC,
// the link's kind; -ip and -mac without -link are refused rather than ignored.
func TestHostdLinkFlags(t *testing.T) {
	for _, c := range []struct {
		link, ip, mac string
		want          string // the error's text, or "" for none
		prefix        string // the prefix parsed, when no error
	}{
		{"", "", "", "", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "192.168.77.1", "", "", "192.168.77.1/24"},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "10.1.2.3/16", "02:00:00:00:00:07", "", "10.1.2.3/16"},
		{"", "192.168.77.1", "", "-ip and -mac are the device's on a link: give -link too", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "192.168.77.1/31", "", "-ip 192.168.77.1/31: the prefix length is 8 to 30", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "192.168.77.1/x", "", "-ip 192.168.77.1/x: the prefix length is 8 to 30", ""},
		{"afpacket:eth0", "192.168.77.1", "", "-link afpacket:eth0: the host device's link is a socket to QEMU or another softirdma (dgram or stream)", ""},
		{"dgram:127.0.0.1:9001", "192.168.77.1", "", "-link dgram:LOCAL,REMOTE, got \"dgram:127.0.0.1:9001\"", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "", "", "no -ip: give softirdma's IPv4 address on the link, its RoCE GID, e.g. -ip 192.168.77.1", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "127.0.0.2", "", "loopback", ""},
		{"dgram:127.0.0.1:9001,127.0.0.1:9002", "192.168.77.1", "01:00:00:00:00:01", "-mac", ""},
	} {
		l, err := parseHostLink(c.link, c.ip, c.mac)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q %q %q: %v", c.link, c.ip, c.mac, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q %q %q: %v, want %q", c.link, c.ip, c.mac, err, c.want)
		case c.want == "" && c.prefix == "" && l != nil:
			t.Errorf("no -link gave a link: %+v", l)
		case c.prefix != "" && (l == nil || l.ip != netip.MustParsePrefix(c.prefix)):
			t.Errorf("%q: link %+v, want prefix %s", c.ip, l, c.prefix)
		}
	}
}

// A bad flag ends hostd with status 2 and one line, before it serves anything.
func TestHostdRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-idle", "-1s"}, {"-ip", "192.168.77.1"}, {"-link", "bogus", "-ip", "192.168.77.1"}, {"stray"}, {"-memory", "pinned"}} {
		var out bytes.Buffer
		if code := runHostd(args, &out, &out); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, out.String())
		}
	}
}
