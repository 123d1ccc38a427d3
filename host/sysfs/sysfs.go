// Package sysfs lays out the sysfs files RDMA user space reads about a device, with the bytes
// the kernel writes for an rxe device: the class files of uverbs and rdma_cm, the device's
// node type and GUIDs, and each port's state, pkey and GID table. libibverbs reads them under
// the directory SYSFS_PATH names; UCX, rdma-core's tests and others read /sys/class/infiniband
// directly, which the host's preload library shows them from the same tree.
package sysfs

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// GID is one entry of a port's GID table.
type GID struct {
	Addr   netip.Addr // the zero Addr: an unused entry
	RoCEv2 bool       // RoCE v2 (UDP); otherwise RoCE v1
	Netdev string     // the network device it belongs to
}

// Port is one port of a device.
type Port struct {
	Active      bool
	Netdev      string // the network device it stands on ("lo")
	NetdevIndex int    // its interface index
	GIDs        []GID  // the whole table: its length is the port's gid_tbl_len
	RateGbits   string // e.g. "2.5 Gb/sec (1X SDR)"; empty gives rxe's on a device with no speed
}

// Device is one RDMA device as sysfs shows it. Its ports are numbered from 1.
type Device struct {
	Name      string // "rxe0"
	NodeGUID  uint64
	Uverbs    string // its uverbs node: "uverbs0"
	UverbsDev string // that node's device number: "231:192"
	Ports     []Port
}

// File is one file of the tree: its bytes, or the errno a read of it fails with (as the
// kernel's types and ndevs of an unused GID entry do, EINVAL).
type File struct {
	Data      []byte
	ReadErrno syscall.Errno
}

// Tree maps each file's path, relative to the sysfs root, to its content.
type Tree map[string]File

// Build is the tree for the devices, with rdma_cm's class files.
func Build(devs []Device) Tree {
	t := Tree{}
	t.put("class/infiniband_verbs/abi_version", "6\n")
	t.put("class/misc/rdma_cm/abi_version", "4\n")
	for _, d := range devs {
		uv := "class/infiniband_verbs/" + d.Uverbs + "/"
		t.put(uv+"ibdev", d.Name+"\n")
		t.put(uv+"abi_version", "2\n")
		t.put(uv+"dev", d.UverbsDev+"\n")
		dir := "class/infiniband/" + d.Name + "/"
		t.put(dir+"node_type", "1: CA\n")
		t.put(dir+"node_guid", guidText(d.NodeGUID))
		t.put(dir+"sys_image_guid", guidText(d.NodeGUID))
		t.put(dir+"fw_ver", "\n")
		t.put(dir+"node_desc", "rxe\n")
		if len(d.Ports) > 0 && d.Ports[0].Netdev != "" {
			t.put(dir+"parent", d.Ports[0].Netdev+"\n")
			// The device's netdev under device/net/, as a NIC's PCI device shows it: rdma-core's
			// tests before 56 find a device's netdev there (and skip rdma_cm without one).
			t.put(dir+"device/net/"+d.Ports[0].Netdev+"/ifindex", fmt.Sprintf("%d\n", d.Ports[0].NetdevIndex))
		}
		for i, p := range d.Ports {
			t.port(fmt.Sprintf("%sports/%d/", dir, i+1), p)
		}
	}
	return t
}

func (t Tree) put(path, data string) { t[path] = File{Data: []byte(data)} }

func (t Tree) port(dir string, p Port) {
	if p.Active {
		t.put(dir+"state", "4: ACTIVE\n")
		t.put(dir+"phys_state", "5: LinkUp\n")
	} else {
		t.put(dir+"state", "1: DOWN\n")
		t.put(dir+"phys_state", "3: Disabled\n")
	}
	for _, name := range []string{"lid", "sm_lid"} {
		t.put(dir+name, "0x0\n")
	}
	t.put(dir+"lid_mask_count", "0\n")
	t.put(dir+"sm_sl", "0\n")
	t.put(dir+"cap_mask", "0x00010000\n") // IB_PORT_CM_SUP, as rxe reports
	rate := p.RateGbits
	if rate == "" {
		rate = "2.5 Gb/sec (1X SDR)"
	}
	t.put(dir+"rate", rate+"\n")
	t.put(dir+"link_layer", "Ethernet\n")
	t.put(dir+"pkeys/0", "0xffff\n")
	for i, g := range p.GIDs {
		n := fmt.Sprint(i)
		if !g.Addr.IsValid() {
			t.put(dir+"gids/"+n, gidText([16]byte{}))
			t[dir+"gid_attrs/types/"+n] = File{ReadErrno: syscall.EINVAL}
			t[dir+"gid_attrs/ndevs/"+n] = File{ReadErrno: syscall.EINVAL}
			continue
		}
		t.put(dir+"gids/"+n, gidText(g.Addr.As16()))
		kind := "IB/RoCE v1\n"
		if g.RoCEv2 {
			kind = "RoCE v2\n"
		}
		t.put(dir+"gid_attrs/types/"+n, kind)
		if g.Netdev == "" {
			// A GID of no netdev: the kernel's sysfs refuses to say one.
			t[dir+"gid_attrs/ndevs/"+n] = File{ReadErrno: syscall.EINVAL}
		} else {
			t.put(dir+"gid_attrs/ndevs/"+n, g.Netdev+"\n")
		}
	}
}

// guidText is a GUID as sysfs prints it: four groups of four hex digits, network order.
func guidText(guid uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], guid)
	return fmt.Sprintf("%04x:%04x:%04x:%04x\n", binary.BigEndian.Uint16(b[0:]), binary.BigEndian.Uint16(b[2:]),
		binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]))
}

// gidText is a GID as the kernel's %pI6 prints it: eight groups of four hex digits, never
// shortened (libibverbs reads exactly that form).
func gidText(gid [16]byte) string {
	var s strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%04x", binary.BigEndian.Uint16(gid[i:]))
	}
	s.WriteByte('\n')
	return s.String()
}

// WriteTo creates the tree's files under root. A file whose read fails is created empty: the
// errno is for whoever serves reads of the tree (the preload library) to give.
func (t Tree) WriteTo(root string) error {
	for path, f := range t {
		full := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// NodeGUID is the GUID rxe gives a device on a network device with this MAC address: its
// modified EUI-64 (the universal/local bit flipped, ff:fe in the middle).
func NodeGUID(mac [6]byte) uint64 {
	eui := [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(eui[:])
}

// RoCEGIDs is a port's GID table as the kernel fills it for a RoCE device on a network
// device: the link-local GID from the MAC, then each address, each as RoCE v1 then v2 (so
// index 1 is the link-local RoCE v2 GID and 3 the first address's), the rest of the n entries
// unused. IPv4 addresses appear as IPv4-mapped IPv6. Addresses past the table are left out.
func RoCEGIDs(netdev string, mac [6]byte, addrs []netip.Addr, n int) []GID {
	var eui [8]byte
	binary.BigEndian.PutUint64(eui[:], NodeGUID(mac))
	var linkLocal [16]byte
	linkLocal[0], linkLocal[1] = 0xfe, 0x80
	copy(linkLocal[8:], eui[:])
	gids := make([]GID, 0, n)
	add := func(a netip.Addr) {
		for _, v2 := range []bool{false, true} {
			if len(gids) < n {
				gids = append(gids, GID{Addr: a, RoCEv2: v2, Netdev: netdev})
			}
		}
	}
	add(netip.AddrFrom16(linkLocal))
	for _, a := range addrs {
		add(netip.AddrFrom16(a.As16()))
	}
	for len(gids) < n {
		gids = append(gids, GID{})
	}
	return gids
}
