package ucma

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/host/ucontext"
)

func testServer(t *testing.T) *Server {
	t.Helper()
	return NewServer(&Device{Verbs: &ucontext.Device{}, Index: 1, NodeGUID: 0x020000fffe000000,
		Owns: func(a netip.Addr) bool { return a.IsLoopback() }})
}

func open(t *testing.T, s *Server) *File {
	t.Helper()
	f, end, err := s.Open(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); end.Close() })
	return f
}

// command frames an rdma_cm command of size bytes (header included), its fields set by set,
// with out bytes of response.
func command(cmd uint32, size, out int, set func(b []byte)) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b, cmd)
	binary.LittleEndian.PutUint16(b[4:], uint16(size-8))
	binary.LittleEndian.PutUint16(b[6:], uint16(out))
	if set != nil {
		set(b)
	}
	return b
}

// newID makes an ID in the TCP port space and returns its number.
func newID(t *testing.T, f *File) uint32 {
	t.Helper()
	r := f.Execute(command(cmdCreateID, 32, 4, func(b []byte) {
		binary.LittleEndian.PutUint64(b[8:], 0xabc)
		binary.LittleEndian.PutUint64(b[16:], 0x1000)
		binary.LittleEndian.PutUint16(b[24:], psTCP)
	}), nil)
	if r.Ret != 32 || len(r.Writes) != 1 || r.Writes[0].Addr != 0x1000 {
		t.Fatalf("CREATE_ID: %+v", r)
	}
	return binary.LittleEndian.Uint32(r.Writes[0].Data)
}

// TestCommandErrnos: the errnos of ucma_write's checks and of its handlers, in the kernel's
// order.
func TestCommandErrnos(t *testing.T) {
	s := testServer(t)
	f, g := open(t, s), open(t, s)
	id := newID(t, f)
	for _, c := range []struct {
		name string
		f    *File
		cmd  []byte
		want syscall.Errno
	}{
		{"shorter than the header", f, []byte{0, 0, 0}, syscall.EINVAL},
		{"an unknown command", f, command(40, 16, 0, nil), syscall.EINVAL},
		{"in past the write", f, func() []byte { b := command(cmdListen, 16, 0, nil); b[4] = 200; return b }(), syscall.EINVAL},
		{"GET_OPTION", f, command(cmdGetOption, 16, 0, nil), syscall.ENOSYS},
		{"CREATE_ID with no room for the answer", f, command(cmdCreateID, 32, 2, nil), syscall.ENOSPC},
		{"CREATE_ID of an unknown port space", f, command(cmdCreateID, 32, 4, func(b []byte) { b[24] = 0x99 }), syscall.EINVAL},
		{"BIND of AF_IB (librdmacm's probe)", f, command(cmdBind, 144, 0, nil), syscall.EAFNOSUPPORT},
		{"LISTEN on an unknown ID", f, command(cmdListen, 16, 0, func(b []byte) { b[8] = 99 }), syscall.ENOENT},
		{"LISTEN on another file's ID", g, command(cmdListen, 16, 0, func(b []byte) { binary.LittleEndian.PutUint32(b[8:], id) }), syscall.EINVAL},
		{"BIND_IP to an address not the device's", f, command(cmdBindIP, 48, 0, func(b []byte) {
			binary.LittleEndian.PutUint16(b[16:], syscall.AF_INET)
			copy(b[20:24], []byte{192, 0, 2, 9})
			binary.LittleEndian.PutUint32(b[44:], id)
		}), syscall.EADDRNOTAVAIL},
		{"RESOLVE_ROUTE before the address", f, command(cmdResolveRoute, 16, 0, func(b []byte) { binary.LittleEndian.PutUint32(b[8:], id) }), syscall.EINVAL},
		{"INIT_QP_ATTR with no device", f, command(cmdInitQPAttr, 24, 144, func(b []byte) { binary.LittleEndian.PutUint32(b[16:], id) }), syscall.EINVAL},
		{"GET_EVENT with none waiting", f, command(cmdGetEvent, 16, eventSize, nil), syscall.EAGAIN},
	} {
		if r := c.f.Execute(c.cmd, nil); r.Ret != -int32(c.want) {
			t.Errorf("%s: write returned %d, want -%d (%v)", c.name, r.Ret, c.want, c.want)
		}
	}
}

// TestResolveEvents: RESOLVE_IP of a device address queues ADDR_RESOLVED, RESOLVE_ROUTE
// ROUTE_RESOLVED, each named by the ID's uid; QUERY_ROUTE then answers the device's GUID and
// netlink index; DESTROY_ID counts the two events GET_EVENT returned.
func TestResolveEvents(t *testing.T) {
	s := testServer(t)
	f := open(t, s)
	id := newID(t, f)
	f.Execute(command(cmdResolveIP, 72, 0, func(b []byte) {
		binary.LittleEndian.PutUint16(b[36:], syscall.AF_INET)
		binary.BigEndian.PutUint16(b[38:], 7174)
		copy(b[40:44], []byte{127, 0, 0, 1})
		binary.LittleEndian.PutUint32(b[64:], id)
	}), nil)
	f.Execute(command(cmdResolveRoute, 16, 0, func(b []byte) { binary.LittleEndian.PutUint32(b[8:], id) }), nil)
	for _, want := range []uint32{evAddrResolved, evRouteResolved} {
		r := f.Execute(command(cmdGetEvent, 16, eventSize, func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 0x2000) }), nil)
		if r.Ret != 16 || len(r.Writes) != 1 {
			t.Fatalf("GET_EVENT: %+v", r)
		}
		ev := r.Writes[0].Data
		if binary.LittleEndian.Uint64(ev) != 0xabc || binary.LittleEndian.Uint32(ev[8:]) != id || binary.LittleEndian.Uint32(ev[12:]) != want {
			t.Fatalf("event uid 0x%x id %d type %d; want 0xabc, %d, %d", binary.LittleEndian.Uint64(ev), binary.LittleEndian.Uint32(ev[8:]), binary.LittleEndian.Uint32(ev[12:]), id, want)
		}
	}
	r := f.Execute(command(cmdQueryRoute, 24, 208, func(b []byte) {
		binary.LittleEndian.PutUint64(b[8:], 0x3000)
		binary.LittleEndian.PutUint32(b[16:], id)
	}), nil)
	q := r.Writes[0].Data
	if binary.BigEndian.Uint64(q) != 0x020000fffe000000 || binary.LittleEndian.Uint32(q[200:]) != 1 || binary.LittleEndian.Uint32(q[192:]) != 1 || q[196] != 1 {
		t.Fatalf("QUERY_ROUTE: GUID %x index %d paths %d port %d", q[:8], binary.LittleEndian.Uint32(q[200:]), binary.LittleEndian.Uint32(q[192:]), q[196])
	}
	r = f.Execute(command(cmdDestroyID, 24, 4, func(b []byte) {
		binary.LittleEndian.PutUint64(b[8:], 0x4000)
		binary.LittleEndian.PutUint32(b[16:], id)
	}), nil)
	if r.Ret != 24 || binary.LittleEndian.Uint32(r.Writes[0].Data) != 2 {
		t.Fatalf("DESTROY_ID: %+v, want 2 events reported", r)
	}
}

// TestDevicePerAddress: with two devices, an ID belongs to the device of the address it is
// bound to, or else to the device that owns or reaches where it resolves to, and QUERY_ROUTE
// names that device (its GUID, its netlink index) and the address it sends from.
func TestDevicePerAddress(t *testing.T) {
	subnet := netip.MustParsePrefix("192.0.2.0/24")
	dev := func(index uint32, guid uint64, own string) *Device {
		a := netip.MustParseAddr(own)
		return &Device{Verbs: &ucontext.Device{}, Index: index, NodeGUID: guid,
			Owns:  func(b netip.Addr) bool { return b.Unmap() == a },
			Reach: func(b netip.Addr) (netip.Addr, bool) { return a, subnet.Contains(b.Unmap()) }}
	}
	s := NewServer(dev(1, 0xa, "192.0.2.1"), dev(2, 0xb, "192.0.2.2"))
	sockaddr := func(b []byte, ip string) {
		binary.LittleEndian.PutUint16(b, syscall.AF_INET)
		a := netip.MustParseAddr(ip).As4()
		copy(b[4:8], a[:])
	}
	for _, c := range []struct {
		name, bind, src, dst string
		index                uint32 // 0: ADDR_ERROR
		guid                 uint64
		from                 string
	}{
		{"to the second device's own address", "", "", "192.0.2.2", 2, 0xb, "192.0.2.2"},
		{"to the first's, from the second's bound address", "192.0.2.2", "", "192.0.2.1", 2, 0xb, "192.0.2.2"},
		{"to the subnet, from RESOLVE_IP's source", "", "192.0.2.2", "192.0.2.77", 2, 0xb, "192.0.2.2"},
		{"to the subnet, no source: the first device that reaches it", "", "", "192.0.2.77", 1, 0xa, "192.0.2.1"},
		{"to nowhere", "", "", "198.51.100.1", 0, 0, ""},
		{"from an address of no device's", "", "192.0.2.9", "192.0.2.1", 0, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := open(t, s)
			id := newID(t, f)
			if c.bind != "" {
				if r := f.Execute(command(cmdBindIP, 48, 0, func(b []byte) {
					sockaddr(b[16:], c.bind)
					binary.LittleEndian.PutUint32(b[44:], id)
				}), nil); r.Ret != 48 {
					t.Fatalf("BIND_IP %s: %d", c.bind, r.Ret)
				}
			}
			f.Execute(command(cmdResolveIP, 72, 0, func(b []byte) {
				if c.src != "" {
					sockaddr(b[8:], c.src)
				}
				sockaddr(b[36:], c.dst)
				binary.LittleEndian.PutUint32(b[64:], id)
			}), nil)
			r := f.Execute(command(cmdGetEvent, 16, eventSize, func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 0x2000) }), nil)
			want := uint32(evAddrResolved)
			if c.index == 0 {
				want = evAddrError
			}
			if r.Ret != 16 || binary.LittleEndian.Uint32(r.Writes[0].Data[12:]) != want {
				t.Fatalf("GET_EVENT after RESOLVE_IP %s: %+v, want event %d", c.dst, r, want)
			}
			if c.index == 0 {
				return
			}
			q := f.Execute(command(cmdQueryRoute, 24, 208, func(b []byte) {
				binary.LittleEndian.PutUint64(b[8:], 0x3000)
				binary.LittleEndian.PutUint32(b[16:], id)
			}), nil).Writes[0].Data
			from, _, _ := addrPort(q[136:164])
			if got := binary.LittleEndian.Uint32(q[200:]); got != c.index || binary.BigEndian.Uint64(q) != c.guid || from.Addr().String() != c.from {
				t.Errorf("QUERY_ROUTE: device %d GUID %x from %v; want %d, %x, %s", got, q[:8], from.Addr(), c.index, c.guid, c.from)
			}
		})
	}
}

// TestBindAnyPort: a BIND_IP to port 0 takes a port of the kernel's ephemeral range, one no
// other ID holds, which QUERY_ROUTE then reports; a second BIND_IP of the ID is EINVAL; a
// destroyed ID's port is free again.
func TestBindAnyPort(t *testing.T) {
	s := testServer(t)
	f := open(t, s)
	bind := func(id uint32, port uint16) int32 {
		return f.Execute(command(cmdBindIP, 48, 0, func(b []byte) {
			binary.LittleEndian.PutUint16(b[16:], syscall.AF_INET)
			binary.BigEndian.PutUint16(b[18:], port)
			copy(b[20:24], []byte{127, 0, 0, 1})
			binary.LittleEndian.PutUint32(b[44:], id)
		}), nil).Ret
	}
	srcPort := func(id uint32) uint16 {
		q := f.Execute(command(cmdQueryRoute, 24, 208, func(b []byte) {
			binary.LittleEndian.PutUint64(b[8:], 0x3000)
			binary.LittleEndian.PutUint32(b[16:], id)
		}), nil).Writes[0].Data
		ap, _, _ := addrPort(q[136:164])
		return ap.Port()
	}
	seen := map[uint16]bool{}
	var ids []uint32
	for range 50 {
		id := newID(t, f)
		if r := bind(id, 0); r != 48 {
			t.Fatalf("BIND_IP to port 0: %d", r)
		}
		p := srcPort(id)
		if p < ephemeralLow || p > ephemeralHigh || seen[p] {
			t.Fatalf("port %d: out of %d-%d or taken twice", p, ephemeralLow, ephemeralHigh)
		}
		seen[p] = true
		ids = append(ids, id)
	}
	if r := bind(ids[0], 0); r != -int32(syscall.EINVAL) {
		t.Errorf("a second BIND_IP: %d, want EINVAL", r)
	}
	p := srcPort(ids[0])
	f.Execute(command(cmdDestroyID, 24, 4, func(b []byte) {
		binary.LittleEndian.PutUint64(b[8:], 0x4000)
		binary.LittleEndian.PutUint32(b[16:], ids[0])
	}), nil)
	s.mu.Lock()
	held := s.ports[boundPort{psTCP, p}]
	s.mu.Unlock()
	if held != 0 {
		t.Errorf("port %d held %d times after its ID went", p, held)
	}
}
