package sysfs_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/host/sysfs"
)

func rxe0OnLo() sysfs.Device {
	var lo [6]byte // lo's MAC is all zero
	return sysfs.Device{
		Name:      "rxe0",
		NodeGUID:  sysfs.NodeGUID(lo),
		Uverbs:    "uverbs0",
		UverbsDev: "231:192",
		Ports: []sysfs.Port{{
			Active: true,
			Netdev: "lo",
			GIDs:   sysfs.RoCEGIDs("lo", lo, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, 8),
		}},
	}
}

// The files of an rxe device on lo, with the bytes the kernel writes: the GUID as rxe derives
// it from the MAC, the link-local GIDs at 0 and 1 and 127.0.0.1 at 2 and 3 (RoCE v1, then v2),
// unused entries as the zero GID whose type and netdev cannot be read.
func TestRXEOnLo(t *testing.T) {
	tree := sysfs.Build([]sysfs.Device{rxe0OnLo()})
	const port = "class/infiniband/rxe0/ports/1/"
	for path, want := range map[string]string{
		"class/infiniband_verbs/abi_version":         "6\n",
		"class/infiniband_verbs/uverbs0/ibdev":       "rxe0\n",
		"class/infiniband_verbs/uverbs0/abi_version": "2\n",
		"class/infiniband_verbs/uverbs0/dev":         "231:192\n",
		"class/misc/rdma_cm/abi_version":             "4\n",
		"class/infiniband/rxe0/node_type":            "1: CA\n",
		"class/infiniband/rxe0/node_guid":            "0200:00ff:fe00:0000\n",
		"class/infiniband/rxe0/sys_image_guid":       "0200:00ff:fe00:0000\n",
		"class/infiniband/rxe0/fw_ver":               "\n",
		"class/infiniband/rxe0/parent":               "lo\n",
		port + "state":                               "4: ACTIVE\n",
		port + "phys_state":                          "5: LinkUp\n",
		port + "link_layer":                          "Ethernet\n",
		port + "cap_mask":                            "0x00010000\n",
		port + "pkeys/0":                             "0xffff\n",
		port + "gids/0":                              "fe80:0000:0000:0000:0200:00ff:fe00:0000\n",
		port + "gids/1":                              "fe80:0000:0000:0000:0200:00ff:fe00:0000\n",
		port + "gids/3":                              "0000:0000:0000:0000:0000:ffff:7f00:0001\n",
		port + "gids/4":                              "0000:0000:0000:0000:0000:0000:0000:0000\n",
		port + "gid_attrs/types/0":                   "IB/RoCE v1\n",
		port + "gid_attrs/types/1":                   "RoCE v2\n",
		port + "gid_attrs/types/3":                   "RoCE v2\n",
		port + "gid_attrs/ndevs/3":                   "lo\n",
	} {
		f, ok := tree[path]
		if !ok || f.ReadErrno != 0 || string(f.Data) != want {
			t.Errorf("%s: %q (errno %v, present %v), want %q", path, f.Data, f.ReadErrno, ok, want)
		}
	}
	for _, path := range []string{port + "gid_attrs/types/4", port + "gid_attrs/ndevs/7"} {
		if f := tree[path]; f.ReadErrno != syscall.EINVAL {
			t.Errorf("%s: read fails with %v, want EINVAL", path, f.ReadErrno)
		}
	}
	for _, absent := range []string{port + "pkeys/1", port + "gids/8", "class/infiniband/rxe0/device", "class/infiniband/rxe0/board_id"} {
		if _, ok := tree[absent]; ok {
			t.Errorf("%s is there; rxe has none", absent)
		}
	}
}

// A MAC's modified EUI-64, as rxe makes its node GUID.
func TestNodeGUID(t *testing.T) {
	tree := sysfs.Build([]sysfs.Device{{Name: "rxe1", NodeGUID: sysfs.NodeGUID([6]byte{0x02, 0x42, 0xac, 0x11, 0x00, 0x02})}})
	if got := string(tree["class/infiniband/rxe1/node_guid"].Data); got != "0042:acff:fe11:0002\n" {
		t.Fatalf("node_guid %q", got)
	}
}

// On disk, each file holds its bytes; one whose read fails is there, empty.
func TestWriteTo(t *testing.T) {
	root := t.TempDir()
	tree := sysfs.Build([]sysfs.Device{rxe0OnLo()})
	if err := tree.WriteTo(root); err != nil {
		t.Fatal(err)
	}
	for path, f := range tree {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(got) != string(f.Data) {
			t.Fatalf("%s: %q, %v; want %q", path, got, err, f.Data)
		}
	}
	if err := tree.WriteTo("/dev/null/x"); err == nil {
		t.Fatal("a tree under a file was written")
	}
}
