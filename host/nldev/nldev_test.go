package nldev_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/host/nldev"
)

// unhex reads hex written in groups with comments after '#' on each line.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var table = nldev.Table{
	Devices: []nldev.Device{{
		Index:        3,
		Name:         "rxe0",
		NodeGUID:     0x0211223344556677,
		SysImageGUID: 0x0211223344556677,
		Uverbs:       nldev.Chardev{Name: "uverbs0", Dev: 0xe7c0},
		Ports:        []nldev.Port{{NetdevIndex: 1, NetdevName: "lo"}},
	}},
	RdmaCM: nldev.Chardev{Dev: 0xa7a},
}

var sock = nldev.Socket{PortID: 0x1234}

// answer sends one request and checks the datagrams it gets back.
func answer(t *testing.T, tab *nldev.Table, s nldev.Socket, req string, want ...string) {
	t.Helper()
	got := tab.Answer(unhex(t, req), s)
	if len(got) != len(want) {
		t.Fatalf("%d datagrams, want %d: %x", len(got), len(want), got)
	}
	for i := range want {
		if w := unhex(t, want[i]); !bytes.Equal(got[i], w) {
			t.Errorf("datagram %d:\n got %x\nwant %x", i, got[i], w)
		}
	}
}

// The device list as libibverbs asks for it (a GET dump, no ACK) and as rdma link asks (with
// NLM_F_ACK, which a dump does not answer): one message per device, then NLMSG_DONE.
func TestGetDump(t *testing.T) {
	dev := `
		6c000000 0114 0200 2a000000 34120000 # 108 bytes, GET, NLM_F_MULTI, seq 42, pid 0x1234
		0800 0100 03000000                   # DEV_INDEX 3
		0900 0200 72786530 00000000          # DEV_NAME "rxe0"
		0800 0300 01000000                   # PORT_INDEX: one port
		0c00 0400 0000000000000000           # CAP_FLAGS
		0c00 0600 7766554433221102           # NODE_GUID, host order
		0c00 0700 7766554433221102           # SYS_IMAGE_GUID
		0500 0e00 01000000                   # DEV_NODE_TYPE: CA
		0500 5400 00000000                   # DEV_DIM
		0900 4300 726f6365 00000000          # DEV_PROTOCOL "roce"
		14000000 0300 0200 2a000000 34120000 00000000 # NLMSG_DONE`
	for _, flags := range []string{"0103", "0503"} {
		answer(t, &table, sock, "10000000 0114 "+flags+" 2a000000 34120000", dev)
	}
}

// libibverbs asks for each device's uverbs node (rxe's driver ID 14, ABI 2) and librdmacm for
// rdma_cm's (ABI 4, no device).
func TestGetChardev(t *testing.T) {
	answer(t, &table, sock, `
		24000000 0f14 0100 07000000 34120000
		0800 0100 03000000          # DEV_INDEX 3
		0b00 4500 75766572 62730000 # CHARDEV_TYPE "uverbs"`, `
		3c000000 0f14 0000 07000000 34120000 # 60 bytes, a doit's reply: no flags
		0800 4900 0e000000                   # UVERBS_DRIVER_ID 14 (rxe)
		0c00 4800 c0e7000000000000           # CHARDEV 231:192
		0c00 4700 0200000000000000           # CHARDEV_ABI 2
		0c00 4600 75766572 62733000          # CHARDEV_NAME "uverbs0"`)
	answer(t, &table, sock, `
		1c000000 0f14 0100 08000000 34120000
		0c00 4500 72646d61 5f636d00 # CHARDEV_TYPE "rdma_cm"`, `
		34000000 0f14 0000 08000000 34120000
		0c00 4800 7a0a000000000000  # CHARDEV 10:122
		0c00 4700 0400000000000000  # CHARDEV_ABI 4
		0c00 4600 72646d61 5f636d00 # CHARDEV_NAME "rdma_cm"`)
}

// rdma link asks each port with NLM_F_ACK: the port (in a reply typed GET, as the kernel's is),
// then the acknowledgement, which echoes only the request's header.
func TestPortGetAcknowledged(t *testing.T) {
	req := `
		20000000 0514 0500 09000000 34120000 # PORT_GET, NLM_F_REQUEST|NLM_F_ACK
		0800 0100 03000000
		0800 0300 01000000`
	answer(t, &table, sock, req, `
		4c000000 0114 0000 09000000 34120000 # 76 bytes, typed GET
		0800 0100 03000000          # DEV_INDEX
		0900 0200 72786530 00000000 # DEV_NAME
		0800 0300 01000000          # PORT_INDEX 1
		0500 0c00 04000000          # PORT_STATE ACTIVE
		0500 0d00 05000000          # PORT_PHYS_STATE LINK_UP
		0800 3200 01000000          # NDEV_INDEX 1
		0700 3300 6c6f0000          # NDEV_NAME "lo"`, `
		24000000 0200 0001 09000000 34120000 # NLMSG_ERROR, NLM_F_CAPPED
		00000000                             # 0: acknowledged
		20000000 0514 0500 09000000 34120000 # the request's header`)
}

// Refusals carry the kernel's errno and echo the request, all of it unless NETLINK_CAP_ACK.
func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		name, req string
		errno     string
	}{
		{"port dump without a device", "10000000 0514 0103 01000000 00000000", "eaffffff"}, // -EINVAL
		{"port past the last", "20000000 0514 0100 01000000 00000000 0800 0100 03000000 0800 0300 02000000", "eaffffff"},
		{"no such device", "18000000 0114 0100 01000000 00000000 0800 0100 04000000", "eaffffff"},
		{"uverbs of no device", "1c000000 0f14 0100 01000000 00000000 0b00 4500 75766572 62730000", "eaffffff"},
		{"rdma_cm of a device", "24000000 0f14 0100 01000000 00000000 0800 0100 03000000 0c00 4500 72646d61 5f636d00", "a1ffffff"}, // -EOPNOTSUPP
		{"an unknown chardev", "18000000 0f14 0100 01000000 00000000 0800 4500 6e6f0000", "a1ffffff"},
		{"a new link", "10000000 0314 0100 01000000 00000000", "ffffffff"},     // -EPERM
		{"resources", "10000000 0914 0100 01000000 00000000", "a1ffffff"},      // RES_GET: -EOPNOTSUPP
		{"another client", "10000000 0110 0100 01000000 00000000", "eaffffff"}, // RDMA_NL_LS
		{"a short DEV_INDEX", "16000000 0114 0100 01000000 00000000 0600 0100 0300", "eaffffff"},
		{"an attribute past the end", "18000000 0114 0100 01000000 00000000 0c00 0100 03000000", "eaffffff"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := unhex(t, c.req)
			n := len(req)
			echo := hex.EncodeToString(req)
			answer(t, &table, sock, c.req, hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, uint32(20+n)))+
				" 0200 0000 01000000 34120000 "+c.errno+" "+echo)
			answer(t, &table, nldev.Socket{PortID: 0x1234, CapAck: true}, c.req,
				"24000000 0200 0001 01000000 34120000 "+c.errno+" "+echo[:32])
		})
	}
}

// What is not a request, or not netlink, gets no answer; two requests in one datagram get two.
func TestWhatIsNotAnswered(t *testing.T) {
	for _, req := range []string{
		"",
		"10000000 0114 0000 01000000 00000000", // no NLM_F_REQUEST
		"10000000 0300 0100 01000000 00000000", // NLMSG_DONE
		"20000000 0614 0100 01000000 00000000", // longer than the datagram
		"0f000000 0614 0100 01000000 00000000", // shorter than its header
		"10000000 0614 0100 01000000 000000",   // a header cut short
	} {
		if got := table.Answer(unhex(t, req), sock); len(got) != 0 {
			t.Errorf("%s: answered %x", req, got)
		}
	}
	answer(t, &table, sock, "10000000 0614 0100 01000000 00000000 10000000 0614 0100 02000000 00000000", `
		30000000 0614 0000 01000000 34120000 0500 4200 01000000 0500 6000 00000000 0500 6700 01000000 0500 5d00 01000000`, `
		30000000 0614 0000 02000000 34120000 0500 4200 01000000 0500 6000 00000000 0500 6700 01000000 0500 5d00 01000000`)
}

// A long device list is cut into datagrams of at most 4096 bytes, iproute2's buffer, each
// message whole and flagged NLM_F_MULTI, NLMSG_DONE after the last.
func TestLongDumpSplits(t *testing.T) {
	var tab nldev.Table
	for i := range 100 {
		tab.Devices = append(tab.Devices, nldev.Device{Index: uint32(i), Name: "rxe" + strings.Repeat("x", i%20)})
	}
	got := tab.Answer(unhex(t, "10000000 0114 0103 05000000 00000000"), sock)
	if len(got) < 3 {
		t.Fatalf("%d datagrams for 100 devices", len(got))
	}
	var devices, dones int
	for i, d := range got {
		if len(d) > 4096 {
			t.Errorf("datagram %d: %d bytes", i, len(d))
		}
		for len(d) > 0 {
			n := binary.LittleEndian.Uint32(d)
			typ, flags := binary.LittleEndian.Uint16(d[4:]), binary.LittleEndian.Uint16(d[6:])
			if flags != 2 {
				t.Errorf("flags %#x", flags)
			}
			switch typ {
			case 0x1401:
				if dones != 0 {
					t.Error("a device after NLMSG_DONE")
				}
				if idx := binary.LittleEndian.Uint32(d[20:]); idx != uint32(devices) {
					t.Errorf("device %d has index %d", devices, idx)
				}
				devices++
			case 3:
				dones++
			default:
				t.Errorf("type %#x", typ)
			}
			d = d[n:]
		}
	}
	if devices != 100 || dones != 1 || !bytes.HasPrefix(got[len(got)-1][len(got[len(got)-1])-20:], []byte{20, 0, 0, 0, 3, 0}) {
		t.Errorf("%d devices, %d NLMSG_DONE, last datagram %x", devices, dones, got[len(got)-1])
	}
}
