package nldev_test

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/host/nldev"
)

// fakeKernel is a kernel with one device, mlx5_0 at index 1, answering with its own sequence
// number and port id as the kernel's socket would (the Table must put the program's back).
type fakeKernel struct{ asked int }

func (k *fakeKernel) Owns(index uint32) bool { return index == 1 }

func (k *fakeKernel) Ask(msg []byte) ([][]byte, error) {
	k.asked++
	typ := binary.LittleEndian.Uint16(msg[4:])
	msg16 := func(typ, flags uint16, body []byte) []byte {
		m := make([]byte, 16, 16+len(body))
		binary.LittleEndian.PutUint32(m, uint32(16+len(body)))
		binary.LittleEndian.PutUint16(m[4:], typ)
		binary.LittleEndian.PutUint16(m[6:], flags)
		binary.LittleEndian.PutUint32(m[8:], 777)   // the relay's sequence
		binary.LittleEndian.PutUint32(m[12:], 4242) // the relay's port id
		return append(m, body...)
	}
	// DEV_INDEX 1, DEV_NAME "mlx5_0".
	dev := []byte{8, 0, 1, 0, 1, 0, 0, 0, 11, 0, 2, 0, 'm', 'l', 'x', '5', '_', '0', 0, 0}
	switch typ {
	case 5<<10 | 1:
		if binary.LittleEndian.Uint16(msg[6:])&0x300 == 0x300 {
			return [][]byte{msg16(typ, 2, dev), msg16(3, 2, []byte{0, 0, 0, 0})}, nil
		}
		return [][]byte{msg16(typ, 0, dev)}, nil
	case 5<<10 | 15:
		return [][]byte{msg16(typ, 0, []byte{12, 0, 70, 0, 'u', 'v', 'e', 'r', 'b', 's', '0', 0})}, nil
	}
	e := make([]byte, 4)
	binary.LittleEndian.PutUint32(e, uint32(0xffffffff-uint32(syscall.EOPNOTSUPP)+1))
	return [][]byte{msg16(2, 0, append(e, msg[:16]...))}, nil
}

// A socket that joins the kernel's devices lists them first, then softirdma's, then one
// NLMSG_DONE, each message with the program's sequence and port id; GET_CHARDEV and GET of a
// kernel's device are the kernel's answers. A socket that does not join sees softirdma's alone
// and the kernel is never asked.
func TestJoinKernelDevices(t *testing.T) {
	k := &fakeKernel{}
	tab := table
	tab.Kernel = k
	dumpReq := make([]byte, 16)
	binary.LittleEndian.PutUint32(dumpReq, 16)
	binary.LittleEndian.PutUint16(dumpReq[4:], 5<<10|1)
	binary.LittleEndian.PutUint16(dumpReq[6:], 0x301)
	binary.LittleEndian.PutUint32(dumpReq[8:], 42)
	names := func(datagrams [][]byte) (names []string, done int) {
		for _, d := range datagrams {
			for len(d) >= 16 {
				l := int(binary.LittleEndian.Uint32(d))
				if seq, pid := binary.LittleEndian.Uint32(d[8:]), binary.LittleEndian.Uint32(d[12:]); seq != 42 || pid != 0x1234 {
					t.Errorf("a message with seq %d pid %#x, want 42 and 0x1234", seq, pid)
				}
				switch binary.LittleEndian.Uint16(d[4:]) {
				case 3:
					done++
				case 5<<10 | 1:
					for a := d[16:l]; len(a) >= 4; {
						al := int(binary.LittleEndian.Uint16(a))
						if binary.LittleEndian.Uint16(a[2:]) == 2 {
							names = append(names, string(a[4:al-1]))
						}
						a = a[(al+3)&^3:]
					}
				}
				d = d[(l+3)&^3:]
			}
		}
		return names, done
	}
	got, done := names(tab.Answer(dumpReq, nldev.Socket{PortID: 0x1234, Join: true}))
	if len(got) != 2 || got[0] != "mlx5_0" || got[1] != "rxe0" || done != 1 {
		t.Fatalf("joined list %v with %d NLMSG_DONE, want [mlx5_0 rxe0] and one", got, done)
	}
	asked := k.asked
	if got, _ := names(tab.Answer(dumpReq, sock)); len(got) != 1 || got[0] != "rxe0" || k.asked != asked {
		t.Fatalf("a socket that does not join: %v, the kernel asked %d times more", got, k.asked-asked)
	}
	chardev := []byte{
		36, 0, 0, 0, 15, 0x14, 5, 0, 43, 0, 0, 0, 0, 0, 0, 0, // GET_CHARDEV, REQUEST|ACK, seq 43
		8, 0, 1, 0, 1, 0, 0, 0, // DEV_INDEX 1
		11, 0, 69, 0, 'u', 'v', 'e', 'r', 'b', 's', 0, 0, // CHARDEV_TYPE uverbs
	}
	r := tab.Answer(chardev, nldev.Socket{PortID: 0x1234, Join: true})
	if len(r) != 2 || binary.LittleEndian.Uint16(r[0][4:]) != 5<<10|15 || string(r[0][20:27]) != "uverbs0" ||
		binary.LittleEndian.Uint32(r[0][8:]) != 43 || binary.LittleEndian.Uint16(r[1][4:]) != 2 {
		t.Fatalf("GET_CHARDEV of the kernel's device: %x, want its answer and an acknowledgement", r)
	}
	if r := tab.Answer(chardev, sock); len(r) != 1 || int32(binary.LittleEndian.Uint32(r[0][16:])) != -int32(syscall.EINVAL) {
		t.Fatalf("GET_CHARDEV of index 1 on a socket that does not join: %x, want EINVAL", r)
	}
}
