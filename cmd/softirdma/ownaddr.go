package main

import (
	"fmt"
	"net/netip"
)

// ipFlag checks a command's -ip: softirdma's own address on its link (ownIPv4).
func ipFlag(text string) (netip.Addr, error) {
	return ownIPv4("-ip ", text, "softirdma's own unicast IPv4 address on the link")
}

// ownIPv4 reads text as an address a NIC may have as its own on a link: IPv4 (softirdma's IPv6
// GID is the link-local one its MAC gives), unicast, and neither unspecified, this-network,
// loopback (Linux drops frames from 127/8 off a link as martians) nor reserved. Every command
// checks its -ip with it (ipFlag), and serve each -function's ip=; label is how the flag is
// written ("-ip " or "ip="), advice what to give instead.
func ownIPv4(label, text, advice string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(text)
	shown := text
	var reason string
	switch {
	case err != nil:
		shown, reason = fmt.Sprintf("%q", text), "is not an IPv4 address"
	case ip.Is4In6():
		reason = "is an IPv4-mapped IPv6 address: write it " + ip.Unmap().String()
	case ip.Is6():
		reason = "is an IPv6 address; softirdma's IPv6 GID is the link-local address its MAC gives"
	case ip.IsUnspecified():
		reason = "is the unspecified address"
	case ip.As4()[0] == 0:
		reason = "is in 0.0.0.0/8, which names this network and no host"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		reason = "is the broadcast address"
	case ip.IsMulticast():
		reason = "is a multicast address (224.0.0.0/4)"
	case ip.As4()[0] >= 240:
		reason = "is reserved (240.0.0.0/4)"
	case ip.IsLoopback():
		reason = "is a loopback address (127.0.0.0/8), which never crosses a link"
	default:
		return ip, nil
	}
	return ip, fmt.Errorf("%s%s %s: give %s, e.g. %s192.168.77.1", label, shown, reason, advice, label)
}
