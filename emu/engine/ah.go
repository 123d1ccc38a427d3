package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/softirdma/softirdma/wire/roce"
)

// AH is an address handle (struct ibv_ah): where a datagram goes. Its link address is resolved
// when it is made, as rxe's core resolves an AH's destination MAC: by the neighbour table for a
// unicast GID, from the group for a multicast one.
type AH struct {
	pd        *PD
	attr      AHAttr
	path      roce.Path // the UDP source port is the sending QP's
	local     bool      // the destination is the device itself
	destroyed bool      // guarded by the tables lock
}

// CreateAH makes an address handle for attr (ibv_create_ah). The destination must be reachable:
// a multicast GID, one of the device's own addresses, or one Resolve knows; otherwise
// EHOSTUNREACH.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	if err := pd.check("create_ah"); err != nil {
		return nil, err
	}
	d := pd.dev
	dst := attr.DGID.Unmap()
	if !dst.IsValid() {
		return nil, fmt.Errorf("create_ah: no destination GID: %w", syscall.EINVAL)
	}
	mac, ok := groupMAC(dst)
	local := false
	switch {
	case ok:
	case d.owns(dst):
		mac, local = d.MAC(), true
	case d.cfg.Resolve != nil:
		// Resolved before the device is locked: on a real link that may wait for an ARP reply.
		mac, ok = d.cfg.Resolve(dst)
	}
	if !ok && !local {
		return nil, fmt.Errorf("create_ah: no link address for %s: %w", dst, syscall.EHOSTUNREACH)
	}
	defer d.flush()
	ah := &AH{pd: pd, attr: attr, local: local, path: roce.Path{SrcMAC: d.MAC(), DstMAC: mac, SrcIP: d.sourceFor(dst),
		DstIP: dst, TrafficClass: attr.TrafficClass, TTL: attr.HopLimit}}
	return ah, nil
}

// Source is the device's address the handle's datagrams come from: of the destination's family,
// link-local for a link-local destination.
func (ah *AH) Source() netip.Addr { return ah.path.SrcIP }

// Attr is what the handle was made with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy destroys the handle (ibv_destroy_ah); work requests posted with it later are refused.
// One already posted still goes where it said.
func (ah *AH) Destroy() error {
	if err := ah.check("destroy_ah"); err != nil {
		return err
	}
	d := ah.pd.dev
	defer hold(d, &d.tab).release()
	ah.destroyed = true
	return nil
}

// isDestroyed says whether Destroy has run.
func (ah *AH) isDestroyed() bool {
	d := ah.pd.dev
	d.tab.Lock()
	defer d.tab.Unlock()
	return ah.destroyed
}

// groupMAC is the Ethernet group address of a multicast IP destination (RFC 1112 for IPv4, RFC
// 2464 for IPv6), as the kernel resolves a multicast GID's MAC.
func groupMAC(ip netip.Addr) ([6]byte, bool) {
	switch {
	case !ip.IsMulticast():
		return [6]byte{}, false
	case ip.Is4():
		a := ip.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}, true
	}
	a := ip.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}, true
}

// Multicast groups: what a device holds, as rxe's limits have them.
const (
	maxMcastGroups   = 8192
	maxMcastAttached = 56 // QPs per group
)

// AttachMcast attaches the QP to the multicast group gid (ibv_attach_mcast): it then receives
// the datagrams sent to the group's address, with its own Q_Key. Only UD QPs attach; attaching
// twice is no error.
func (qp *QP) AttachMcast(gid netip.Addr) error {
	if err := qp.check("attach_mcast", "QP"); err != nil {
		return err
	}
	d := qp.dev
	g := gid.Unmap()
	if !g.IsMulticast() || qp.typ != QPTypeUD {
		return fmt.Errorf("attach_mcast: %s on a %s QP: %w", gid, qp.typ, syscall.EINVAL)
	}
	defer hold(d, &d.mu).release()
	qps := d.group(g)
	switch {
	case slices.Contains(qps, qp):
		return nil
	case len(qps) == 0 && int(d.ngroups.Load()) >= maxMcastGroups, len(qps) >= maxMcastAttached:
		return fmt.Errorf("attach_mcast: %s: %w", gid, syscall.ENOMEM)
	}
	d.setGroup(g, append(slices.Clip(qps), qp))
	d.event(Event{QP: qp.qpn, Kind: EvQPState, Msg: fmt.Sprintf("attached to multicast group %s", g)})
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast); EINVAL if it is not attached.
func (qp *QP) DetachMcast(gid netip.Addr) error {
	if err := qp.check("detach_mcast", "QP"); err != nil {
		return err
	}
	d := qp.dev
	g := gid.Unmap()
	defer hold(d, &d.mu).release()
	qps := d.group(g)
	i := slices.Index(qps, qp)
	if i < 0 {
		return fmt.Errorf("detach_mcast: the QP is not attached to %s: %w", gid, syscall.EINVAL)
	}
	d.setGroup(g, slices.Delete(slices.Clone(qps), i, i+1))
	return nil
}

// group is the QPs attached to multicast group g, a slice no one changes: read without a lock.
func (d *Device) group(g netip.Addr) []*QP {
	if d.ngroups.Load() == 0 {
		return nil
	}
	v, _ := d.mcast.Load(g)
	qps, _ := v.([]*QP)
	return qps
}

// setGroup makes qps, which no one changes after, the QPs attached to group g; none takes the
// group off the device. The device lock is held.
func (d *Device) setGroup(g netip.Addr, qps []*QP) {
	_, had := d.mcast.Load(g)
	switch {
	case len(qps) > 0:
		d.mcast.Store(g, qps)
		if !had {
			d.ngroups.Add(1)
		}
	case had:
		d.mcast.Delete(g)
		d.ngroups.Add(-1)
	}
}

// detachAll takes a destroyed QP off every group. The device lock is held.
func (d *Device) detachAll(qp *QP) {
	if d.ngroups.Load() == 0 {
		return
	}
	d.mcast.Range(func(k, v any) bool {
		qps := v.([]*QP)
		if i := slices.Index(qps, qp); i >= 0 {
			d.setGroup(k.(netip.Addr), slices.Delete(slices.Clone(qps), i, i+1))
		}
		return true
	})
}
