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
