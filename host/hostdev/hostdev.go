// Package hostdev makes the devices host programs use (softirdma hostd's rxe0, serve's -host
// devices): each an engine on a wall-clock host (emu/realtime) on a port of a fabric (package
// fabric), and what the preload library shows of it: its uverbs device (host/ucontext), rdma_cm
// on its connection manager (host/ucma), its sysfs entries (host/sysfs) and RDMA netlink's
// answers about it (host/nldev). Programs on two devices of one fabric reach each other through
// the fabric's switch, where its capture and its faults see their frames; two programs on one
// device reach each other through the device's loopback, as on rxe.
package hostdev

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/host/nldev"
	"github.com/softirdma/softirdma/host/sysfs"
	"github.com/softirdma/softirdma/host/ucma"
	"github.com/softirdma/softirdma/host/ucontext"
)

// Spec is one device.
type Spec struct {
	// Name is the device's, its fabric port's (a fault's from=) and its engine's. rdma-core's
	// rxe provider binds a device it finds through sysfs by a name that starts with "rxe".
	Name string
	// MAC is the device's on the fabric.
	MAC [6]byte
	// IP is the device's IPv4 address (GID 2 and 3) and the subnet it reaches from it: rdma_cm
	// resolves an address of the subnet to this device. A Lo device may have none (127.0.0.1).
	IP netip.Prefix
	// Lo makes the device stand on lo, as rxe on lo would: its port names lo, its node GUID is
	// lo's, and it answers for 127.0.0.0/8 and for Addrs, each a pair of GIDs after IP's.
	// Otherwise the device names no netdev, its GUID is its MAC's, and its GIDs are its
	// link-local address's and IP's.
	Lo    bool
	Addrs []netip.Addr
	// MTU is the port's active MTU (0: 4096).
	MTU engine.MTU
	// Tap, if set, sees every frame the device sends to and receives from its port.
	Tap func(frame []byte)
}

// The GID table of a Lo device: at least minGIDs entries, at most maxGIDs.
const (
	minGIDs = 16
	maxGIDs = 256
)

// The character devices' numbers, as the kernel gives them (uverbsN is 231:192+N, rdma_cm a misc
// device) and the preload library's fstat reports them (host/preload/paths.c).
const (
	UverbsMajor, UverbsMinor = 231, 192
	RdmaCMMajor, RdmaCMMinor = 10, 58
)

// hugeDev is a device number as the kernel's huge_encode_dev writes it for netlink.
func hugeDev(major, minor uint64) uint64 { return minor&0xff | major<<8 | (minor&^0xff)<<12 }

// Config is what the devices share.
type Config struct {
	Log *slog.Logger
	// Events, if set, gets every device's engine events (SOFTIRDMA_DEBUG).
	Events engine.EventSink
	// FirstIndex is the netlink index of the first device (0: 1), and FirstUverbs N of its
	// uverbsN: on a host with RDMA devices of its own, the numbers after the kernel's.
	FirstIndex  uint32
	FirstUverbs uint32
	// Kernel, if set, is the kernel's netlink, whose devices a program that asks sees beside
	// the set's (nldev.Table.Kernel).
	Kernel nldev.Kernel
}

// Set is the devices of a daemon: what its config (host/daemon.Config) takes.
type Set struct {
	Devices []*ucontext.Device // uverbsN is Devices[N-UverbsBase]
	// UverbsBase is N of the first device's uverbsN (Config.FirstUverbs).
	UverbsBase uint32
	Engines    []*engine.Device // the same devices' engines
	RdmaCM     *ucma.Server
	Netlink    *nldev.Table
	Tree       sysfs.Tree
	hosts      []*realtime.Host
}

// New makes the devices on ports of fab, in the order given.
func New(fab *fabric.Fabric, specs []Spec, cfg Config) (*Set, error) {
	if len(specs) == 0 {
		return nil, errors.New("hostdev: no device")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Set{UverbsBase: cfg.FirstUverbs,
		Netlink: &nldev.Table{RdmaCM: nldev.Chardev{Name: "rdma_cm", Dev: hugeDev(RdmaCMMajor, RdmaCMMinor)}, Kernel: cfg.Kernel}}
	var cms []*ucma.Device
	var sys []sysfs.Device
	for i, sp := range specs {
		if slices.ContainsFunc(specs[:i], func(o Spec) bool { return o.Name == sp.Name }) {
			s.Close()
			return nil, fmt.Errorf("hostdev: two devices named %s", sp.Name)
		}
		d, err := newDevice(fab, sp, max(cfg.FirstIndex, 1)+uint32(i), cfg.FirstUverbs+uint32(i), cfg)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("device %s: %w", sp.Name, err)
		}
		s.hosts = append(s.hosts, d.host)
		s.Devices = append(s.Devices, d.verbs)
		s.Engines = append(s.Engines, d.host.Device())
		cms = append(cms, d.cm)
		sys = append(sys, d.sysfs)
		s.Netlink.Devices = append(s.Netlink.Devices, d.nl)
	}
	s.RdmaCM = ucma.NewServer(cms...)
	for i, d := range cms {
		m, err := rdmacm.New(s.Engines[i], rdmacm.Config{Events: s.RdmaCM.Events(d), Logger: cfg.Log})
		if err != nil {
			s.Close()
			return nil, err
		}
		d.Manager = m
	}
	s.Tree = sysfs.Build(sys)
	return s, nil
}

// device is one device's parts, before the set joins them.
type device struct {
	host  *realtime.Host
	verbs *ucontext.Device
	cm    *ucma.Device
	sysfs sysfs.Device
	nl    nldev.Device
}

func newDevice(fab *fabric.Fabric, sp Spec, index, uverbsN uint32, cfg Config) (*device, error) {
	main := sp.IP.Addr()
	var gids []sysfs.GID
	var guid uint64
	netdev, netdevIndex := "", 0
	var prefixes []netip.Prefix
	if sp.Lo {
		if !main.IsValid() {
			main = netip.MustParseAddr("127.0.0.1")
		}
		// The main address comes first after the link-local GID: GID 2 and 3.
		addrs := slices.Insert(slices.DeleteFunc(slices.Clone(sp.Addrs), func(a netip.Addr) bool { return a == main }), 0, main)
		var loMAC [6]byte
		guid, netdev, netdevIndex = sysfs.NodeGUID(loMAC), "lo", 1
		gids = sysfs.RoCEGIDs(netdev, loMAC, addrs, min(max(minGIDs, 2*(len(addrs)+1)), maxGIDs))
		prefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	} else {
		if !main.Is4() {
			return nil, fmt.Errorf("an IPv4 address is needed, not %v", sp.IP)
		}
		guid = sysfs.NodeGUID(sp.MAC)
		gids = sysfs.RoCEGIDs("", sp.MAC, []netip.Addr{main}, minGIDs)
	}
	owned := map[netip.Addr]bool{}
	var ips []netip.Addr
	for _, g := range gids {
		if a := g.Addr.Unmap(); g.Addr.IsValid() && !owned[a] {
			owned[a] = true
			if a != main {
				ips = append(ips, a)
			}
		}
	}
	port, err := fab.AddPort(sp.Name, 0)
	if err != nil {
		return nil, err
	}
	host, err := realtime.NewHost(realtime.HostConfig{Name: sp.Name, Link: port, MAC: sp.MAC, IP: main, IPs: ips,
		Prefixes: prefixes, Answer: true, ActiveMTU: sp.MTU, Events: cfg.Events, Tap: sp.Tap, SendWindow: fab.SendWindow()})
	if err != nil {
		port.Close()
		return nil, err
	}
	go host.Run()
	table := make([]netip.Addr, len(gids))
	for i, g := range gids {
		table[i] = g.Addr
	}
	d := &device{host: host, verbs: &ucontext.Device{Engine: host.Device(), NodeGUID: guid, GIDs: table, Log: cfg.Log}}
	d.cm = &ucma.Device{Verbs: d.verbs, Index: index, NodeGUID: guid, Log: cfg.Log,
		Owns: func(a netip.Addr) bool {
			a = a.Unmap().WithZone("")
			return owned[a] || sp.Lo && a.IsLoopback()
		},
		// Beyond its own addresses the device reaches its subnet, from its address there.
		Reach: func(a netip.Addr) (netip.Addr, bool) {
			return main, sp.IP.IsValid() && sp.IP.Masked().Contains(a.Unmap())
		}}
	uverbs := fmt.Sprintf("uverbs%d", uverbsN)
	d.sysfs = sysfs.Device{Name: sp.Name, NodeGUID: guid, Uverbs: uverbs, UverbsDev: fmt.Sprintf("%d:%d", UverbsMajor, UverbsMinor+uverbsN),
		Ports: []sysfs.Port{{Active: true, Netdev: netdev, NetdevIndex: netdevIndex, GIDs: gids}}}
	d.nl = nldev.Device{Index: index, Name: sp.Name, NodeGUID: guid, SysImageGUID: guid,
		Uverbs: nldev.Chardev{Name: uverbs, Dev: hugeDev(UverbsMajor, uint64(UverbsMinor+uverbsN))},
		Ports:  []nldev.Port{{NetdevIndex: uint32(netdevIndex), NetdevName: netdev}}}
	return d, nil
}

// Close stops the devices' hosts; their programs' files fail from then on.
func (s *Set) Close() {
	for _, h := range s.hosts {
		h.Close()
	}
	s.hosts = nil
}
