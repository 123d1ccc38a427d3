// Package hw is the softirdma PCI function (docs/device.md, hw/abi): its config space, its
// registers, its control queue and the objects the control queue creates on the RDMA engine
// (emu), over the guest memory the bus maps for it. A bus (the vfio-user server, or a test's
// in-process bus) calls ConfigRead/ConfigWrite, RegionRead/RegionWrite, MapDMA/UnmapDMA and
// Reset; the function raises MSI-X vectors through the function it is given.
package hw

import (
	"cmp"
	"encoding/binary"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// Config sets up a Function.
type Config struct {
	Name  string
	Clock engine.Clock     // required
	Rand  mrand.Source     // nil: unpredictable
	Link  engine.Link      // nil: the device reaches only itself (loopback)
	MAC   [6]byte          // until the driver writes one
	IP    netip.Addr       // the device's address when the driver programs no GID
	Event engine.EventSink // the engine's trace; nil: none
	// Resolve maps a peer's address to its link address.
	Resolve func(netip.Addr) ([6]byte, bool)
	// IRQ signals an MSI-X vector; nil drops interrupts. It is called without the function's
	// lock held.
	IRQ func(vector int)
	// Engine, when set, makes the function's engine when the driver enables it, with the link
	// address and IP addresses the driver programmed: a device on a real link (realtime.Host's
	// Rebind). Otherwise the function makes its own on Link.
	Engine func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *engine.Device
	// Readdress, when set, gives an engine made by Engine the addresses the driver programs
	// while it runs (realtime.Host's SetAddresses); otherwise the engine's SetAddresses is called.
	Readdress func(mac [6]byte, ip netip.Addr, ips []netip.Addr)
	// Log, when set, hears of every control command (debug) and of each one that fails (info,
	// with the device's reason): what a driver's author needs when a verb returns an errno.
	Log *slog.Logger
	// ActiveMTU is the largest path MTU the link carries (an adapter's MTU less RoCEv2's
	// headers), what QUERY_PORT reports as active; 0: 4096, as socket links carry.
	ActiveMTU engine.MTU
	// SendWindow is the send window of the engine the function makes itself (not Engine's):
	// engine.DeviceConfig.SendWindow, 0 for rxe's.
	SendWindow int
	// DoorbellRuns runs what a send-queue doorbell posted on the goroutine that took the
	// doorbell (engine.QP.PostSendHere, then SendPosted) rather than on Clock, whose goroutine
	// would be woken for it. Only for a clock and a link that take calls from any goroutine, as
	// serve's wall clock and links do: a simulator's run on its own goroutine alone.
	DoorbellRuns bool
	// MaxRegisteredPages caps the pages of all the function's MRs together (their page lists,
	// and a fast-register MR's most pages), which is what registered memory costs the device:
	// past it a registration fails with ENOMEM. 0: DefaultMaxRegisteredPages.
	MaxRegisteredPages uint64
	// MaxWorkRequests caps the work-request slots of all the function's send queues, receive
	// queues and SRQs together: the engine keeps a few hundred bytes of state for each, so
	// thousands of the largest queues would take the device process's memory. Past it
	// CREATE_QP, CREATE_SRQ and a resizing MODIFY_SRQ fail with ENOMEM. 0:
	// DefaultMaxWorkRequests.
	MaxWorkRequests uint64
	// MaxSTags caps the function's MRs, and its windows, each (MAX_MR and MAX_MW): each costs
	// the device a few hundred bytes whatever its size. 0: DefaultMaxSTags.
	MaxSTags uint32
}

// DefaultMaxRegisteredPages is 16 GiB of 4 KiB pages (or 8 TiB of 2 MiB ones): more than a
// guest of this machine's size registers, about 256 MiB of the device's memory at most.
const DefaultMaxRegisteredPages = 1 << 22

// DefaultMaxWorkRequests is 2^19 slots, 32 queues of the largest size or thousands of the
// sizes applications use: under 256 MiB of the engine's state.
const DefaultMaxWorkRequests = 1 << 19

// DefaultMaxSTags is 2^19 MRs and as many windows.
const DefaultMaxSTags = 1 << 19

// maxSTags is Config.MaxSTags or its default, within the engine's own limits.
func (f *Function) maxSTags(mw bool) int {
	n := int(cmp.Or(f.cfg.MaxSTags, DefaultMaxSTags))
	if mw {
		return min(n, engine.DefaultLimits.MaxMW)
	}
	return min(n, engine.DefaultLimits.MaxMR)
}

// Function is one softirdma PCI function. Its methods are safe for concurrent use: the bus
// calls them from its connection, the engine's callbacks from its own goroutines.
type Function struct {
	cfg Config
	mem engine.GuestMemory

	mu     sync.Mutex // the registers and the object tables
	config [configSize]byte
	regs   registers
	dev    *engine.Device // made when the driver enables the function
	pds    map[uint32]*pdEntry
	nextPD uint32
	// mrs and mws change under mu and keysMu both; the send path reads them under keysMu
	// alone (it holds a QP's posting lock, which comes after mu).
	keysMu sync.Mutex
	mrs    map[uint32]mrEntry // by STag index
	mws    map[uint32]mwEntry // by STag index
	// regPages is what the MRs' pages add up to, against cfg.MaxRegisteredPages; wrSlots what
	// the queues' work-request slots add up to, against cfg.MaxWorkRequests.
	regPages, wrSlots uint64
	eqs               map[uint32]*eq
	nextEQ            uint32
	// asyncEQ gets the engine's async events, pfEQ its page faults; odpMRs counts the
	// on-demand MRs, which need pfEQ.
	asyncEQ, pfEQ *eq
	odpMRs        int
	cqs           map[uint32]*cq // by CQN
	cqSlots       [abi.MaxCQSlots]*cq
	qps           map[uint32]*qp // by QPN
	qpSlots       [abi.MaxQPSlots]*qp
	srqs          map[uint32]*srq // by SRQN
	// eth are the Ethernet function's TX and RX rings (abi.EthTX, abi.EthRX), nil until made.
	eth [2]*ethRing
	// av is the address-vector table the driver gave (SET_AV_TABLE): its pages and entries,
	// read by UD work requests. It changes under mu and avMu both; the send path reads it, and
	// ahs, the engine's address handles made for UD work requests, under avMu.
	av   *avTable
	avMu sync.Mutex
	ahs  map[ahKey]*engine.AH
}

type avTable struct {
	pages   []uint64
	entries uint32
}

type mrEntry struct {
	mr  *engine.MR
	pdn uint32
	// pages is what the MR counts against the device's cap: its page list's length, or a
	// fast-register MR's most pages, which also bound its REG_MR work requests, or the pages
	// an on-demand MR was given (OpMapPages; those a guest's DMA unmap took stay counted until
	// the MR goes).
	pages    uint32
	onDemand bool
}

type mwEntry struct {
	mw  *engine.MW
	pdn uint32
}

type pdEntry struct {
	pd   *engine.PD
	uses int // MRs and windows in it: a PD in use is not deallocated (EBUSY)
}

// registers are BAR 0's read-write state.
type registers struct {
	ctrl, status, fatal uint32
	macLo, macHi        uint32
	ctrlQBase           uint64
	ctrlQLog            uint32
	ctrlQProd           uint32
	ctrlQCons           uint32
	gidValid            uint32
	gids                [abi.GIDTableLen][16]byte
}

// New makes a function in its power-on state.
func New(cfg Config) *Function {
	f := &Function{cfg: cfg}
	f.buildConfigSpace()
	f.resetLocked()
	return f
}

// Memory is the guest memory the function reaches: the regions the bus mapped.
func (f *Function) Memory() *engine.GuestMemory { return &f.mem }

// MapDMA makes guest memory [iova, iova+len(mem)) reachable. A region the bus could not map
// (no file descriptor, read-only ROM) is not given to the function at all.
func (f *Function) MapDMA(iova uint64, mem []byte) error { return f.mem.Map(iova, mem) }

// UnmapDMA takes [iova, iova+size) away: every MR and window of the engine and every queue
// that reaches into it is revoked first, so once UnmapDMA returns nothing of the function
// touches it and the bus may unmap the memory.
func (f *Function) UnmapDMA(iova, size uint64) error {
	if err := f.mem.Unmap(iova, size); err != nil {
		return err
	}
	f.revoke(iova, size, "a queue's guest memory was unmapped")
	return nil
}

// revoke takes [iova, iova+size) away from every MR, window and queue that reaches into it
// and fails their QPs with why; once it returns none of them touches the range.
func (f *Function) revoke(iova, size uint64, why string) {
	f.mu.Lock()
	dev := f.dev
	// A queue whose ring reaches into the range is done with: a CQ overflows from then on (its
	// QPs fail, CQ_ERR), an EQ drops its entries. Taking each queue's lock waits for a write
	// in progress.
	for _, e := range f.eqs {
		if e.r.overlaps(iova, size) {
			e.mu.Lock()
			e.gone = true
			e.mu.Unlock()
		}
	}
	for _, c := range f.cqs {
		c.mu.Lock()
		if c.r.overlaps(iova, size) {
			c.gone = true
		}
		c.mu.Unlock()
	}
	for _, s := range f.srqs {
		s.mu.Lock()
		if s.r.overlaps(iova, size) {
			s.gone = true
		}
		s.mu.Unlock()
	}
	for _, e := range f.eth {
		if e != nil && e.r.overlaps(iova, size) {
			e.mu.Lock()
			e.gone = true
			e.mu.Unlock()
		}
	}
	f.avMu.Lock()
	if f.av != nil {
		for _, p := range f.av.pages {
			if p < iova+size && iova < p+4096 {
				f.av = nil // the table's memory goes: UD work requests find no address vector
				break
			}
		}
	}
	f.avMu.Unlock()
	var affected []*qp
	for _, q := range f.qps {
		if q.sq.overlaps(iova, size) || q.rq != nil && q.rq.overlaps(iova, size) {
			affected = append(affected, q)
		}
	}
	f.mu.Unlock()
	for _, q := range affected {
		// Each queue's lock waits for an access in progress; none is taken with mu held,
		// which a WQE's posting takes after them.
		q.markGone()
		q.emu.Fail(why)
	}
	if dev != nil {
		dev.RevokeRange(&f.mem, iova, size)
	}
}

// Reset is the function-level reset the bus asks for (vfio-user's DEVICE_RESET, a client
// leaving): what DEV_CTRL's reset bit does, and config space back to power-on as after a PCI
// function-level reset (memory decoding, bus mastering and MSI-X off). The guest memory the
// bus mapped stays mapped: it belongs to the bus, not the driver.
func (f *Function) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resetLocked()
	f.buildConfigSpace()
}

// resetLocked returns the device to its power-on state (DEV_CTRL's reset bit): every object
// the driver created is gone and the registers hold their initial values; config space is the
// bus's and stays.
func (f *Function) resetLocked() {
	if f.dev != nil {
		f.dev.Stop()
	}
	f.dev = nil
	f.keysMu.Lock()
	f.pds, f.mrs, f.mws, f.nextPD = map[uint32]*pdEntry{}, map[uint32]mrEntry{}, map[uint32]mwEntry{}, 0
	f.regPages, f.wrSlots = 0, 0
	f.keysMu.Unlock()
	for _, e := range f.eqs {
		e.mu.Lock()
		e.gone = true
		e.mu.Unlock()
	}
	for _, c := range f.cqs {
		c.mu.Lock()
		c.gone = true
		c.mu.Unlock()
	}
	for _, q := range f.qps {
		q.posting.Lock()
		q.gone = true
		q.posting.Unlock()
	}
	f.eqs, f.nextEQ, f.asyncEQ, f.cqs, f.cqSlots = map[uint32]*eq{}, 0, nil, map[uint32]*cq{}, [abi.MaxCQSlots]*cq{}
	f.pfEQ, f.odpMRs = nil, 0
	for _, q := range f.srqs {
		q.mu.Lock()
		q.gone = true
		q.mu.Unlock()
	}
	f.qps, f.qpSlots, f.srqs = map[uint32]*qp{}, [abi.MaxQPSlots]*qp{}, map[uint32]*srq{}
	f.avMu.Lock()
	f.av, f.ahs = nil, map[ahKey]*engine.AH{}
	f.avMu.Unlock()
	for i, e := range f.eth {
		if e != nil {
			e.mu.Lock()
			e.gone = true
			e.mu.Unlock()
		}
		f.eth[i] = nil
	}
	mac := f.cfg.MAC
	f.regs = registers{
		macLo: binary.LittleEndian.Uint32(mac[0:4]),
		macHi: uint32(binary.LittleEndian.Uint16(mac[4:6])),
	}
}

// addressesLocked are the MAC and addresses the driver programmed: the valid GIDs (the main
// address the IPv4 one if there is one, as rxe's GID 1), or the configured IP if there are none.
func (f *Function) addressesLocked() (mac [6]byte, ip netip.Addr, ips []netip.Addr) {
	for i, g := range f.regs.gids {
		if f.regs.gidValid&(1<<i) != 0 {
			ips = append(ips, netip.AddrFrom16(g).Unmap())
		}
	}
	ip = f.cfg.IP
	if len(ips) > 0 {
		ip = ips[0]
		for _, a := range ips {
			if a.Is4() {
				ip = a
				break
			}
		}
	}
	binary.LittleEndian.PutUint32(mac[0:4], f.regs.macLo)
	binary.LittleEndian.PutUint16(mac[4:6], uint16(f.regs.macHi))
	return mac, ip, ips
}

// readdressLocked hands a running engine the addresses the driver just programmed.
func (f *Function) readdressLocked() {
	if f.dev == nil {
		return
	}
	mac, ip, ips := f.addressesLocked()
	if f.cfg.Readdress != nil {
		f.cfg.Readdress(mac, ip, ips)
		return
	}
	f.dev.SetAddresses(mac, ip, ips)
}

// enableLocked starts the engine with the addresses the driver programmed.
func (f *Function) enableLocked() {
	mac, ip, ips := f.addressesLocked()
	if f.cfg.Engine != nil {
		f.dev = f.cfg.Engine(mac, ip, ips)
	} else {
		resolve := f.cfg.Resolve
		if resolve == nil {
			// Only the device's own addresses resolve (the engine answers those itself).
			resolve = func(netip.Addr) ([6]byte, bool) { return [6]byte{}, false }
		}
		f.dev = engine.NewDevice(engine.DeviceConfig{Name: f.cfg.Name, Clock: f.cfg.Clock, Rand: f.cfg.Rand, MAC: mac,
			IP: ip, IPs: ips, Events: f.cfg.Event, Resolve: resolve, SendWindow: f.cfg.SendWindow})
		link := f.cfg.Link
		if link == nil {
			link = noLink{}
		}
		f.dev.Attach(link)
	}
	f.dev.OnAsyncEvent(f.asyncEvent)
	f.dev.OnPageFault(f.pageFault)
	f.regs.status = abi.DevStatusReady
}

// asyncEvent puts one of the engine's async events in the async EQ, if the driver made one.
// It runs on the engine's clock, never with the engine or the function locked.
func (f *Function) asyncEvent(ev engine.AsyncEvent) {
	f.mu.Lock()
	e := f.asyncEQ
	f.mu.Unlock()
	if e != nil && e.post(uint8(ev.Type), ev.Num) {
		f.signal(e.vector)
	}
}

// Device is the engine behind the function while it is enabled, nil otherwise.
func (f *Function) Device() *engine.Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dev
}

// errnoOf is the errno a driver gets for err.
func errnoOf(err error) uint32 {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return uint32(e)
	}
	return uint32(syscall.EINVAL)
}

// noLink is the link of a function without one: frames to the device itself loop back (the
// engine turns them around before the link), the rest go nowhere.
type noLink struct{}

func (noLink) Send([]byte) error { return nil }
