package neigh

import (
	"net/netip"
	"sync"
	"time"
)

// Table holds the link addresses learned for IP addresses. It is safe for concurrent use.
type Table struct {
	mu      sync.Mutex
	entries map[netip.Addr][6]byte
	changed chan struct{} // closed and replaced whenever an entry is learned
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{entries: map[netip.Addr][6]byte{}, changed: make(chan struct{})}
}

// Learn records that ip is at mac.
func (t *Table) Learn(ip netip.Addr, mac [6]byte) {
	ip = ip.Unmap()
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.entries[ip]; ok && old == mac {
		return
	}
	t.entries[ip] = mac
	close(t.changed)
	t.changed = make(chan struct{})
}

// Lookup returns the link address of ip, if known.
func (t *Table) Lookup(ip netip.Addr) ([6]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mac, ok := t.entries[ip.Unmap()]
	return mac, ok
}

// Wait returns the link address of ip, waiting up to timeout for it to be learned; ask is
// called first and then every retry interval to send a request.
func (t *Table) Wait(ip netip.Addr, timeout, retry time.Duration, ask func()) ([6]byte, bool) {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		mac, ok := t.entries[ip.Unmap()]
		changed := t.changed
		t.mu.Unlock()
		if ok {
			return mac, true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return [6]byte{}, false
		}
		ask()
		select {
		case <-changed:
		case <-time.After(min(retry, left)):
		}
	}
}

// Responder answers ARP and Neighbor Solicitations for a host's own addresses and learns the
// senders of every valid neighbour message into Table.
type Responder struct {
	MAC   [6]byte
	IPs   []netip.Addr
	Table *Table
}

func (r *Responder) owns(ip netip.Addr) bool {
	for _, a := range r.IPs {
		if a.Unmap() == ip.Unmap() {
			return true
		}
	}
	return false
}

// Handle looks at a frame. If it is an ARP or ND message it learns the sender, appends the
// answer to reply when the message asks for one of the host's addresses, and reports consumed.
// Other frames are left alone (consumed false).
func (r *Responder) Handle(frame, reply []byte) (out []byte, consumed bool) {
	m, err := Parse(frame)
	if err == ErrNotNeighbor {
		return reply, false
	}
	if err != nil {
		return reply, true // a malformed neighbour message: nothing else wants it
	}
	if m.SenderIP.IsValid() && !m.SenderIP.IsUnspecified() && m.SenderMAC != ([6]byte{}) && !r.owns(m.SenderIP) {
		r.Table.Learn(m.SenderIP, m.SenderMAC)
	}
	switch {
	case !m.IPv6 && m.Op == ARPRequest && r.owns(m.TargetIP):
		reply = AppendARP(reply, ARPReply, m.SenderMAC, r.MAC, m.TargetIP, m.SenderMAC, m.SenderIP)
	case m.IPv6 && m.Op == TypeNeighborSolicitation && r.owns(m.TargetIP) && !m.SenderIP.IsUnspecified():
		reply = AppendNA(reply, r.MAC, m.TargetIP, m.EthSrc, m.SenderIP)
	}
	return reply, true
}

// Request appends a request for ip's link address: a broadcast ARP request, or a Neighbor
// Solicitation to ip's solicited-node group, from the host's first address of the same family.
func (r *Responder) Request(dst []byte, ip netip.Addr) []byte {
	ip = ip.Unmap()
	for _, own := range r.IPs {
		own = own.Unmap()
		if own.Is4() != ip.Is4() {
			continue
		}
		if ip.Is4() {
			return AppendARP(dst, ARPRequest, Broadcast, r.MAC, own, [6]byte{}, ip)
		}
		if own.IsLinkLocalUnicast() == ip.IsLinkLocalUnicast() {
			return AppendNS(dst, r.MAC, own, ip)
		}
	}
	return dst
}

// LinkLocal is the EUI-64 IPv6 link-local address of mac (RFC 4291 appendix A), the address a
// Linux interface gives itself and Soft-RoCE's GID 0.
func LinkLocal(mac [6]byte) netip.Addr {
	a := [16]byte{0xfe, 0x80, 8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
	return netip.AddrFrom16(a)
}
