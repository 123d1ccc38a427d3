package engine

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/roce"
)

// Link carries a device's frames. Send transmits one whole Ethernet frame and does not keep it
// after it returns. Frames arriving from the link go to Device.Receive.
type Link interface {
	Send(frame []byte) error
}

// BufferLink is a Link that lends the device its frame buffers, so a frame is built where the
// link will carry it and handed over without a copy: SendBuffer takes ownership of a frame
// built in a buffer from Buffer.
type BufferLink interface {
	Link
	Buffer() []byte
	SendBuffer(frame []byte)
}

// BatchLink is a Link that sends several frames in one call (a socket's sendmmsg): the frames a
// device has waiting for the link go out together, in order. It does not keep them after it
// returns.
type BatchLink interface {
	Link
	SendFrames(frames [][]byte)
}

// SealedLink is a BufferLink that can tell a receiver in the same process that a frame is one
// the engine built and sealed: SendSealed is SendBuffer for such a frame. A link that hands it to
// another engine with nothing on the way changing it (no corrupting fault) delivers it with
// ReceiveSealed, and its ICRC is computed once, by the sender, as a NIC's frame through a
// switch's memory is checked once, by its receiver. What changes a frame on the way, or comes
// from outside the process, is never passed on as sealed.
type SealedLink interface {
	BufferLink
	SendSealed(frame []byte)
}

// SealedBatchLink is a SealedLink that takes the sealed frames of one flush in one call, in
// order, so that it can take its own locks once for them all rather than once a frame (a
// switch's port does). The link owns the buffers once it has them.
type SealedBatchLink interface {
	SealedLink
	SendSealedBatch(frames [][]byte)
}

// UnsealedLink is a SealedLink that computes the ICRC of the engine's frames itself, and only
// when something will read it. SendUnsealed is SendSealed for a frame with every byte written
// but its ICRC: before a capture, a fault or anything outside the process sees the frame, the
// link seals it (roce.SealFrame); one it hands to another engine untouched goes with
// ReceiveSealed, whose parse never reads the ICRC, so nobody computes it. On a fabric in one
// process with no capture and no fault that is all its frames: the ICRC, the costliest part of
// building a small frame, is computed where its bytes are read, as a NIC computes it where they
// leave the chip. Frames for the device itself or its own multicast groups, and any frame the
// engine sends another way, are sealed by the engine as ever.
type UnsealedLink interface {
	SealedLink
	SendUnsealed(frame []byte)
}

// DeviceConfig sets up a Device.
type DeviceConfig struct {
	Name  string       // for events and traces
	Clock Clock        // required
	Rand  mrand.Source // key8 values and UDP source ports; nil: unpredictable
	MAC   [6]byte
	IP    netip.Addr // the device's address; its RoCEv2 GID is this address (IPv4-mapped for IPv4)
	// IPs are more addresses the device answers on, such as an IPv6 link-local one; each is
	// also a GID.
	IPs []netip.Addr
	// Prefixes are ranges the device answers on as if each address in them were its own, as
	// Linux's lo answers for all of 127.0.0.0/8; they are no GIDs.
	Prefixes []netip.Prefix
	// Events receives the engine's events; nil drops them.
	Events EventSink
	// Resolve maps a peer's IP address to its MAC address.
	Resolve func(netip.Addr) ([6]byte, bool)
	// ActiveMTU is the port's active MTU: the path MTU of its datagram QPs. 0 means 4096.
	ActiveMTU MTU
	// SendWindow is how many PSNs an RC QP sends past the oldest one not yet acknowledged
	// before it waits. 0 (or less) means DefaultSendWindow, rxe's; above MaxSendWindow means
	// MaxSendWindow. A real NIC keeps far more in flight: a larger window lets a link whose
	// round trip is long (a socket between processes) carry more than the window per round
	// trip, at the cost of more to send again when a frame is lost.
	SendWindow int
}

// Limits are the device's capabilities (ibv_device_attr).
type Limits struct {
	MaxQP, MaxQPWR, MaxSGE, MaxCQE, MaxMR, MaxMW, MaxPD, MaxSRQ, MaxSRQWR int
	MaxQPRdAtom, MaxQPInitRdAtom                                          int
	MaxInline                                                             int
	MaxMsgSize                                                            uint64
}

// DefaultLimits are what a device offers unless told otherwise.
var DefaultLimits = Limits{
	MaxQP: 1 << 16, MaxQPWR: 1 << 14, MaxSGE: 32, MaxCQE: 1 << 20, MaxMR: keys.DefaultMaxMR,
	MaxMW: keys.DefaultMaxMW, MaxPD: 1 << 16, MaxSRQ: 1 << 12, MaxSRQWR: 1 << 14,
	MaxQPRdAtom: 128, MaxQPInitRdAtom: 128, MaxInline: 256, MaxMsgSize: 1 << 31,
}

// Device is one softirdma NIC: its key space, its queues and its transport. All of its methods
// are safe for concurrent use.
type Device struct {
	cfg    DeviceConfig
	limits Limits
	window uint32 // the send window, in PSNs: 1..MaxSendWindow
	// ackEvery is how many packets of a message go without AckReq at most: rxe's 64, or half
	// the window when that is less.
	ackEvery uint32
	clock    Clock
	rnd      *mrand.Rand
	// What every frame looks at, read without a lock: the device's MAC and addresses (the
	// config's until SetAddresses), the link it is attached to, where its events go (nil:
	// nowhere), its Ethernet side (OnOtherFrame's), whether it is stopped or its port down
	// (SetPortActive; it then sends and receives nothing), and its counters.
	addrs    atomic.Pointer[addresses]
	att      atomic.Pointer[attachment]
	sink     atomic.Pointer[EventSink]
	other    atomic.Pointer[func(frame []byte)]
	looped   atomic.Pointer[func(frame []byte)]
	stopped  atomic.Bool
	onDemand atomic.Bool // an on-demand MR was registered: receives look for page faults
	portDown atomic.Bool
	stats    counters

	// mu guards the QPs by number, and changes to the multicast groups.
	mu      mutex[deviceLock]
	nextQPN uint32
	qps     map[uint32]*QP
	rxQPs   qpIndex // qps for the receive path, read without mu
	// mcast holds the multicast groups with QPs of the device attached: each group's QPs, in a
	// slice replaced whole when one attaches or detaches, so that the data path reads them
	// without a lock. ngroups counts the groups.
	mcast   sync.Map // netip.Addr to []*QP
	ngroups atomic.Int32

	// tab guards the object tables: the key space, the MRs and windows it names (by STag index,
	// with what their handles hold), PD numbers, the CQs and SRQs by number, address handles.
	// Each map is made at its first use, so a device without such objects allocates none.
	tab    tables
	keys   *keys.Space
	nextPD uint32
	nextVA uint64
	cqs    numbers[*CQ]
	srqs   numbers[*SRQ]
	mrs    map[uint32]*MR
	mws    map[uint32]*MW

	// atomics makes the remote atomic operations of all the device's QPs atomic with one
	// another, as rxe's one atomic_ops_lock does.
	atomics mutex[atomicsLock]

	async  asyncEvents
	parser roce.Parser
	rx     sync.Pool // of *roce.Frame, one for each goroutine receiving
	loop   loopback
	out    outbox
}

// Stats is a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	defer d.flush()
	s := d.stats.snapshot()
	s.TxFrames, s.TxBytes = d.out.sent()
	return s
}

// Stats counts what the device did with frames.
type Stats struct {
	TxFrames, TxBytes, RxFrames, RxDropped, RxMalformed, RxBadICRC, RxUnknownQP uint64
	Retransmits, Timeouts, RNRNAKsSent, SeqNAKsSent, DuplicatesSeen             uint64
	// NAKsSent counts the NAKs of every kind (RNR, sequence, and the errors that end a QP) sent,
	// as TxFrames counts frames: once each, as a capture of the wire holds them. EvNAK events
	// report a NAK both where it is sent and where it arrives, so counting them counts it twice
	// (or once, when the wire lost it).
	NAKsSent uint64
	// RxBadPKey and RxBadQKey count the packets dropped for a P_Key or a datagram's Q_Key
	// that does not match (the port's bad_pkey_cntr and qkey_viol_cntr); RxNoRecv the
	// datagrams dropped because no receive was posted. All are in RxDropped too.
	RxBadPKey, RxBadQKey, RxNoRecv uint64
	// Loopback counts the sent frames (also in TxFrames) that were addressed to the device
	// itself and delivered to its own receive path instead of the link.
	Loopback uint64
	// RxOther counts the received frames that were not RoCEv2 for the device and went to the
	// OnOtherFrame function; TxOther the frames sent by SendFrame.
	RxOther, TxOther uint64
	// RxSealed counts the received frames (also in RxFrames) that came sealed (ReceiveSealed):
	// another engine of the process computed their ICRC and nothing changed them since, so
	// this one did not compute it again.
	RxSealed uint64
	// PageFaults counts the accesses that found pages of an on-demand MR missing and asked
	// for them (OnPageFault).
	PageFaults uint64
}

// counters are the device's Stats as it keeps them: each counted where it happens, by whichever
// goroutine, with no lock; TxFrames and TxBytes are the outbox's (send).
type counters struct {
	RxFrames, RxDropped, RxMalformed, RxBadICRC, RxUnknownQP             atomic.Uint64
	Retransmits, Timeouts, RNRNAKsSent, SeqNAKsSent, DuplicatesSeen      atomic.Uint64
	NAKsSent, RxBadPKey, RxBadQKey, RxNoRecv, Loopback, RxOther, TxOther atomic.Uint64
	PageFaults                                                           atomic.Uint64
	// rxChecked counts the received frames that did not come sealed; RxSealed is the rest of
	// RxFrames, so a sealed frame, the common case, costs one atomic add rather than two.
	rxChecked atomic.Uint64
}

func (c *counters) snapshot() Stats {
	// Every frame counted in rxChecked was counted in RxFrames first: loaded in this order,
	// RxSealed cannot come out negative.
	checked := c.rxChecked.Load()
	s := Stats{
		RxFrames:  c.RxFrames.Load(),
		RxDropped: c.RxDropped.Load(), RxMalformed: c.RxMalformed.Load(), RxBadICRC: c.RxBadICRC.Load(),
		RxUnknownQP: c.RxUnknownQP.Load(), Retransmits: c.Retransmits.Load(), Timeouts: c.Timeouts.Load(),
		RNRNAKsSent: c.RNRNAKsSent.Load(), SeqNAKsSent: c.SeqNAKsSent.Load(), DuplicatesSeen: c.DuplicatesSeen.Load(),
		NAKsSent: c.NAKsSent.Load(), RxBadPKey: c.RxBadPKey.Load(), RxBadQKey: c.RxBadQKey.Load(),
		RxNoRecv: c.RxNoRecv.Load(), Loopback: c.Loopback.Load(), RxOther: c.RxOther.Load(), TxOther: c.TxOther.Load(),
		PageFaults: c.PageFaults.Load(),
	}
	s.RxSealed = s.RxFrames - checked
	return s
}

// NewDevice makes a device. It does nothing on a link until Attach.
func NewDevice(cfg DeviceConfig) *Device {
	src := cfg.Rand
	if src == nil {
		var seed [32]byte
		_, _ = rand.Read(seed[:])
		src = mrand.NewChaCha8(seed)
	}
	r := mrand.New(src)
	if cfg.Name == "" {
		cfg.Name = "dev"
	}
	d := &Device{
		cfg:     cfg,
		limits:  DefaultLimits,
		window:  uint32(min(cmp.Or(max(cfg.SendWindow, 0), DefaultSendWindow), MaxSendWindow)),
		clock:   cfg.Clock,
		rnd:     r,
		keys:    keys.New(keys.Config{Rand: r}),
		nextQPN: 0x11, // QPNs 0 and 1 are the special QPs; rxe starts at 17 too
		nextVA:  0x7f00_0000_0000,
		qps:     map[uint32]*QP{},
	}
	d.ackEvery = min(maxPktsPerAck, max(d.window/2, 1))
	d.loop.dev = d
	d.att.Store(&attachment{})
	d.SetEventSink(cfg.Events)
	d.addrs.Store(&addresses{mac: cfg.MAC, ip: cfg.IP, ips: cfg.IPs, prefixes: cfg.Prefixes})
	d.loop.deliver = d.deliverLoopback
	if resolve := cfg.Resolve; resolve != nil {
		// The device's own addresses resolve to its own MAC without asking anyone, so a QP
		// whose peer is on the same device reaches RTR even where neighbour resolution would
		// find nobody answering (a Host whose kernel does not own the address).
		d.cfg.Resolve = func(ip netip.Addr) ([6]byte, bool) {
			if d.owns(ip) {
				return d.MAC(), true
			}
			return resolve(ip)
		}
	}
	return d
}

// MaxFrame is the longest frame the device builds: a 4096-byte payload with IPv6, VLAN and the
// largest extension headers.
const MaxFrame = 4096 + 128

// Clock is the device's clock: what a consumer on the device's side of the link (its connection
// manager) keeps time by, so that it runs in virtual time in the simulator.
func (d *Device) Clock() Clock { return d.clock }

// ActiveMTU is the port's active MTU: the path MTU of its datagram QPs (ibv_port_attr.active_mtu).
func (d *Device) ActiveMTU() MTU { return d.activeMTU() }

// activeMTU is the port's active MTU.
func (d *Device) activeMTU() MTU {
	if d.cfg.ActiveMTU.Bytes() == 0 {
		return MTU4096
	}
	return d.cfg.ActiveMTU
}

// Name is the device's name.
func (d *Device) Name() string { return d.cfg.Name }

// addresses are what a device answers to and sends from.
type addresses struct {
	mac [6]byte
	ip  netip.Addr   // the main one: the device's GID
	ips []netip.Addr // more it owns
	// prefixes are ranges it answers on (DeviceConfig.Prefixes); addresses it changes keep them
	prefixes []netip.Prefix
}

// IP is the device's address.
func (d *Device) IP() netip.Addr { return d.addrs.Load().ip }

// MAC is the device's link address.
func (d *Device) MAC() [6]byte { return d.addrs.Load().mac }

// GID is the device's RoCEv2 GID: its IPv6 address, or the IPv4-mapped one.
func (d *Device) GID() [16]byte { return d.IP().As16() }

// SetAddresses changes the device's link address and addresses, as a NIC's do when its
// driver programs them (the GID table following a netdev's addresses). QPs already past RTR
// keep the path they were given; frames to an address the device no longer owns are dropped.
func (d *Device) SetAddresses(mac [6]byte, ip netip.Addr, ips []netip.Addr) {
	d.addrs.Store(&addresses{mac: mac, ip: ip, ips: slices.Clone(ips), prefixes: d.addrs.Load().prefixes})
	d.event(Event{Kind: EvAddress, Msg: fmt.Sprintf("addresses %s %v mac %s", ip, ips, net.HardwareAddr(mac[:]))})
}

// owns says whether ip is one of the device's addresses.
func (d *Device) owns(ip netip.Addr) bool {
	a := d.addrs.Load()
	ip = ip.Unmap()
	if ip == a.ip.Unmap() {
		return true
	}
	for _, o := range a.ips {
		if o.Unmap() == ip {
			return true
		}
	}
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// sourceFor is the device's address to send to dst from.
func (d *Device) sourceFor(dst netip.Addr) netip.Addr {
	a := d.addrs.Load()
	dst = dst.Unmap()
	if d.owns(dst) {
		// To itself a device sends from the address it sends to: both ends of a connection
		// on one device then see one address pair, whichever of its addresses it was.
		return dst
	}
	for _, o := range append([]netip.Addr{a.ip}, a.ips...) {
		o = o.Unmap()
		if o.Is4() == dst.Is4() && (dst.Is4() || o.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast()) {
			return o
		}
	}
	return a.ip.Unmap()
}

// OnOtherFrame gives fn every frame the device receives that is not RoCEv2 addressed to it:
// ARP, neighbour discovery, its host's IP traffic, RoCEv2 for other addresses. That is a RoCE
// NIC's Ethernet side: the frames its netdev gets. fn runs after the engine's locks are released,
// with a copy of the frame it may keep. Without it such frames are dropped (RxDropped).
func (d *Device) OnOtherFrame(fn func(frame []byte)) {
	if fn == nil {
		d.other.Store(nil)
	} else {
		d.other.Store(&fn)
	}
	d.flush()
}

// OnLoopback sets the function that sees each frame the device sends to itself, as it is
// handed back: the frames a link never carries (two programs on one device), for a capture.
// It runs with no lock of the engine held and must not keep the frame; nil stops it.
func (d *Device) OnLoopback(fn func(frame []byte)) {
	if fn == nil {
		d.looped.Store(nil)
	} else {
		d.looped.Store(&fn)
	}
}

// HasEthernet says whether the device has an Ethernet side (OnOtherFrame): a host then leaves
// ARP and neighbour discovery for its addresses to it.
func (d *Device) HasEthernet() bool { return d.other.Load() != nil }

// SendFrame sends a frame the engine did not build (a netdev's) on the device's link, in order
// with the engine's own; one addressed to the device itself loops back to it. The frame is
// copied.
func (d *Device) SendFrame(frame []byte) {
	b := append([]byte(nil), frame...)
	if !d.stopped.Load() && !d.portDown.Load() {
		d.stats.TxOther.Add(1)
		d.out.put(outFrame{b: b, local: d.loop.local(b)})
	}
	d.flush()
}

// passOther hands a frame that is not the engine's to OnOtherFrame's function, if there is
// one, once the engine's locks are released.
func (d *Device) passOther(frame []byte) bool {
	fn := d.other.Load()
	if fn == nil {
		return false
	}
	d.stats.RxOther.Add(1)
	c := append([]byte(nil), frame...)
	d.later(func() { (*fn)(c) })
	return true
}

// Limits are the device's capabilities.
func (d *Device) Limits() Limits { return d.limits }

// SendWindow is how many PSNs an RC QP of the device sends past the oldest unacknowledged one.
func (d *Device) SendWindow() int { return int(d.window) }

// SetEventSink changes where the device's events go; nil turns them off.
func (d *Device) SetEventSink(sink EventSink) {
	if sink == nil {
		d.sink.Store(nil)
	} else {
		d.sink.Store(&sink)
	}
	d.flush()
}

// attachment is the link a device is attached to. The engine sends through the loopback, which
// passes on to link every frame not addressed to the device itself, and lends the buffers of
// lender (the link, when it lends them) or its own.
type attachment struct {
	link   Link
	lender BufferLink
	sealer SealedLink // the lender, when it passes on that frames are sealed
	// sealedBatch is the sealer, when it takes them in batches
	sealedBatch SealedBatchLink
	unsealer    UnsealedLink // the sealer, when it seals the engine's frames itself
	batch       BatchLink    // the link, when it sends frames in batches
}

// Attach connects the device to a link. It is made for a device before its traffic: a frame
// being built meanwhile may go the old way.
func (d *Device) Attach(l Link) {
	a := &attachment{link: l}
	a.lender, _ = l.(BufferLink)
	a.sealer, _ = l.(SealedLink)
	a.sealedBatch, _ = l.(SealedBatchLink)
	a.unsealer, _ = l.(UnsealedLink)
	a.batch, _ = l.(BatchLink)
	d.att.Store(a)
	d.flush()
}

// Drain returns once every frame the device has queued so far is on its link (or looped back):
// a datagram's send completes when its frame is queued, so a program that ends after its last
// completion drains before it stops the device, or the frame is lost with it. It waits for
// another goroutine's flush in progress, for a second at most (a device still busy sending then
// is cut off as Stop cuts it).
func (d *Device) Drain() {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		busy := d.out.busy()
		d.flushAll() // carries out what is queued, unless another goroutine is doing so
		if !busy {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Stop halts the device as if its power were cut: it sends and receives nothing more and its
// timers do nothing. Its peers see silence.
func (d *Device) Stop() {
	defer d.flush()
	d.stopped.Store(true)
	d.event(Event{Kind: EvFault, Msg: "device stopped"})
}

// tracing says whether anyone listens to events; hot paths check it before formatting one.
func (d *Device) tracing() bool { return d.sink.Load() != nil }

// event queues an event for the sink, which gets it once the engine's locks are released.
func (d *Device) event(e Event) {
	if !d.tracing() {
		return
	}
	e.T = d.clock.Now()
	e.Device = d.cfg.Name
	d.out.putEvent(e)
}

// PD is a protection domain.
type PD struct {
	dev    *Device
	handle keys.PD
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	if err := d.check("alloc_pd"); err != nil {
		return nil, err
	}
	defer hold(d, &d.tab).release()
	if int(d.nextPD) >= d.limits.MaxPD {
		return nil, fmt.Errorf("alloc_pd: %w", syscall.ENOMEM)
	}
	d.nextPD++
	return &PD{dev: d, handle: keys.PD(d.nextPD)}, nil
}

// Device is the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// MR is a registered memory region.
type MR struct {
	pd     *PD
	key    keys.Key
	addr   uint64
	length uint64
	buf    []byte
	guest  *guestMapping // set for MRs over an address space (RegGuestMR, RegImplicitMR)
	// pins is held for reading by each copy under way over the MR's memory (pinned), taken
	// with the lookup that found the memory; drain waits for them. It has cache lines of its
	// own, as every packet writes its reader count: sharing a line with whatever the allocator
	// put beside the MR, those atomic adds were 8% of serve's CPU under a guest-to-guest
	// transfer, and 3% padded.
	_    cpu.CacheLinePad
	pins rwMutex[pinsLock]
	_    cpu.CacheLinePad
}

// LKey is the MR's local key.
func (mr *MR) LKey() uint32 { return uint32(mr.key) }

// RKey is the MR's remote key (the same as the lkey).
func (mr *MR) RKey() uint32 { return uint32(mr.key) }

// Addr is the address of the MR's first byte, as SGEs and peers name it.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len is the MR's length.
func (mr *MR) Len() uint64 { return mr.length }

// Buf is the registered memory.
func (mr *MR) Buf() []byte { return mr.buf }

// RegMR registers buf. Go slices have no stable address to put on the wire, so the device gives
// the MR an address of its own, page-aligned and never reused, as the kernel gives a process
// virtual addresses; it is the same for the same sequence of registrations, which keeps
// simulated runs repeatable. Addr says what it is.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := pd.check("reg_mr"); err != nil {
		return nil, err
	}
	d := pd.dev
	d.tab.Lock()
	va := d.nextVA
	d.nextVA += (uint64(len(buf)) + 0xfff) &^ 0xfff
	d.nextVA += 0x1000 // a guard page between MRs catches off-by-one peers
	d.tab.Unlock()
	d.flush()
	if access&AccessZeroBased != 0 {
		va = 0
	}
	return pd.RegMRIova(buf, va, access)
}

// RegMRIova registers buf at the wire address iova (ibv_reg_mr_iova).
func (pd *PD) RegMRIova(buf []byte, iova uint64, access Access) (*MR, error) {
	if err := pd.check("reg_mr"); err != nil {
		return nil, err
	}
	d := pd.dev
	defer hold(d, &d.tab).release()
	k, err := d.keys.RegMR(keys.MRSpec{PD: pd.handle, Mem: keys.Contiguous(buf), IOVA: iova, Access: access})
	if err != nil {
		return nil, err
	}
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("reg_mr %s len %d iova 0x%x %s", k, len(buf), iova, access)})
	mr := &MR{pd: pd, key: k, addr: iova, length: uint64(len(buf)), buf: buf}
	d.mrs = put(d.mrs, k.Index(), mr)
	return mr, nil
}

// RegCopiedMR registers length bytes at addr of memory the device reaches by copying (another
// process's, keys.Copier), with iova the wire address of its first byte: a host program's MR.
// Nothing of it is pinned or checked now; a copy that fails later moves no byte. Its Buf is nil.
func (pd *PD) RegCopiedMR(c keys.Copier, addr, length, iova uint64, access Access) (*MR, error) {
	if err := pd.check("reg_mr"); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, nilObject("reg_mr", "copier")
	}
	d := pd.dev
	defer hold(d, &d.tab).release()
	k, err := d.keys.RegMR(keys.MRSpec{PD: pd.handle, Mem: keys.Copied(c, addr, length), IOVA: iova, Access: access})
	if err != nil {
		return nil, err
	}
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("reg_mr %s copied 0x%x len %d iova 0x%x %s", k, addr, length, iova, access)})
	mr := &MR{pd: pd, key: k, addr: iova, length: length}
	d.mrs = put(d.mrs, k.Index(), mr)
	return mr, nil
}

// Dereg deregisters the MR. It fails with EBUSY while memory windows are bound to it. Once it
// returns, no copy of the device's is under way over the MR's memory, and none starts.
func (mr *MR) Dereg() error {
	if err := mr.check("dereg_mr"); err != nil {
		return err
	}
	d := mr.pd.dev
	defer d.flush()
	d.tab.Lock()
	if err := d.keys.DeregMR(mr.key, d.clock.Now()); err != nil {
		d.tab.Unlock()
		return err
	}
	delete(d.mrs, mr.key.Index())
	d.event(Event{Kind: EvKey, Key: uint32(mr.key), Msg: "dereg_mr " + mr.key.String()})
	d.tab.Unlock()
	mr.drain()
	return nil
}

// Rereg changes the MR's access rights, PD or memory (ibv_rereg_mr). The keys stay.
func (mr *MR) Rereg(flags keys.ReregFlags, pd *PD, buf []byte, access Access) error {
	return mr.rereg(flags, pd, access, func() (translation, error) {
		return translation{mem: keys.Contiguous(buf), iova: mr.addr, buf: buf}, nil
	})
}

// translation is what a rereg with keys.ChangeTranslation gives the MR.
type translation struct {
	mem   keys.Memory
	iova  uint64
	buf   []byte
	guest *guestMapping
}

// rereg runs a rereg whose new memory, when flags change it, next gives under the tables lock.
// With new memory it returns once no copy is under way over the old.
func (mr *MR) rereg(flags keys.ReregFlags, pd *PD, access Access, next func() (translation, error)) error {
	if err := mr.check("rereg_mr"); err != nil {
		return err
	}
	if flags&keys.ChangePD != 0 {
		if err := pd.check("rereg_mr"); err != nil {
			return err
		}
	}
	d := mr.pd.dev
	defer d.flush()
	moved, err := mr.reregLocked(flags, pd, access, next)
	if moved {
		mr.drain()
	}
	return err
}

// reregLocked is rereg's change of the MR, under the tables lock; moved says it took new memory.
func (mr *MR) reregLocked(flags keys.ReregFlags, pd *PD, access Access, next func() (translation, error)) (moved bool, err error) {
	d := mr.pd.dev
	d.tab.Lock()
	defer d.tab.Unlock()
	spec := keys.MRSpec{Access: access, IOVA: mr.addr}
	if pd != nil {
		spec.PD = pd.handle
	}
	var t translation
	if flags&keys.ChangeTranslation != 0 {
		if t, err = next(); err != nil {
			return false, err
		}
		spec.Mem, spec.IOVA = t.mem, t.iova
	}
	if err := d.keys.ReregMR(mr.key, flags, spec); err != nil {
		return false, err
	}
	if flags&keys.ChangePD != 0 {
		mr.pd = pd
	}
	if flags&keys.ChangeTranslation == 0 {
		return false, nil
	}
	mr.addr, mr.buf, mr.length, mr.guest = t.iova, t.buf, t.mem.Len(), t.guest
	return true, nil
}

// MW is a memory window. Its key is the key space's, found by index: a bind moves it when it
// runs.
type MW struct {
	pd    *PD
	typ   MWType
	index uint32
	// posted counts the type 1 binds posted through the bind verb that have not run yet: each
	// will move the key8 on by one, and the consumer holds the rkey as if they had run.
	posted uint32
	gone   keys.Key // the key the window had when it was deallocated; 0 while it lives
}

// RKey is the window's current rkey as the consumer holds it: a type 1 bind updates it when the
// bind is posted (and rolls it back if the bind fails or is dropped before it runs), a type 2
// bind when it completes.
func (mw *MW) RKey() uint32 {
	defer mw.pd.dev.flush()
	return mw.currentRKey()
}

// currentRKey is RKey for the engine.
func (mw *MW) currentRKey() uint32 {
	d := mw.pd.dev
	d.tab.Lock()
	defer d.tab.Unlock()
	return uint32(mw.rkey())
}

// key is the window's key in the key space (the one its last executed bind gave it). The tables
// lock is held, as for rkey.
func (mw *MW) key() keys.Key {
	if mw.gone != 0 {
		return mw.gone
	}
	k, _ := mw.pd.dev.keys.KeyAt(mw.index)
	return k
}

// rkey is the consumer's view: the key space's key, moved on by the type 1 binds still queued.
func (mw *MW) rkey() keys.Key {
	k := mw.key()
	return k.WithKey8(k.Key8() + uint8(mw.posted))
}

// Type is the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// AllocMW allocates a memory window of type 1, 2 (2B) or 2A.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if err := pd.check("alloc_mw"); err != nil {
		return nil, err
	}
	d := pd.dev
	defer hold(d, &d.tab).release()
	k, err := d.keys.AllocMW(pd.handle, typ)
	if err != nil {
		return nil, err
	}
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("alloc_mw %s %s", typ, k)})
	mw := &MW{pd: pd, typ: typ, index: k.Index()}
	d.mws = put(d.mws, k.Index(), mw)
	return mw, nil
}

// Dealloc frees the window, unbinding it.
func (mw *MW) Dealloc() error {
	if err := mw.check("dealloc_mw"); err != nil {
		return err
	}
	d := mw.pd.dev
	defer d.flush()
	reached, err := mw.deallocLocked()
	if err != nil {
		return err
	}
	reached.drain() // no WRITE through the window is still landing when dealloc_mw returns
	return nil
}

// deallocLocked takes the window out of the key space and returns the MR it reached.
func (mw *MW) deallocLocked() (*MR, error) {
	d := mw.pd.dev
	d.tab.Lock()
	defer d.tab.Unlock()
	k := mw.key()
	reached := d.keyMRLocked(k)
	if err := d.keys.DeallocMW(k, d.clock.Now()); err != nil {
		return nil, err
	}
	mw.gone = k
	delete(d.mws, mw.index)
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: "dealloc_mw " + k.String()})
	return reached, nil
}

// AllocFastRegMR allocates an MR for fast registration (REG_MR work requests), FREE until then.
func (pd *PD) AllocFastRegMR(maxLen uint64) (*MR, error) {
	if err := pd.check("alloc_mr"); err != nil {
		return nil, err
	}
	d := pd.dev
	defer hold(d, &d.tab).release()
	k, err := d.keys.AllocFastRegMR(pd.handle, maxLen)
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, key: k}
	d.mrs = put(d.mrs, k.Index(), mr)
	return mr, nil
}

// QueryMW reports what the device knows of a window.
func (d *Device) QueryMW(mw *MW) (keys.MWInfo, error) {
	if err := d.check("query_mw"); err != nil {
		return keys.MWInfo{}, err
	}
	if err := mw.check("query_mw"); err != nil {
		return keys.MWInfo{}, err
	}
	defer hold(d, &d.tab).release()
	return d.keys.QueryMW(mw.key())
}

// put sets m[k] = v, making m first if it is nil.
func put[V any](m map[uint32]V, k uint32, v V) map[uint32]V {
	if m == nil {
		m = map[uint32]V{}
	}
	m[k] = v
	return m
}

// Lookups by number, for a device model that receives numbers from a guest (a QPN in a
// doorbell, a CQN in a command, an lkey in a WQE): each finds only a live object, takes the
// lock of its table as the other calls do, and returns false for any number it does not know,
// in range or not.

// QP finds the live QP numbered qpn.
func (d *Device) QP(qpn uint32) (*QP, bool) {
	defer hold(d, &d.mu).release()
	qp, ok := d.qps[qpn]
	return qp, ok
}

// CQ finds the live CQ numbered cqn (see CQ.Num).
func (d *Device) CQ(cqn uint32) (*CQ, bool) { return lookupNumbered(d, &d.cqs, cqn) }

// SRQ finds the live SRQ numbered n (see SRQ.Num).
func (d *Device) SRQ(n uint32) (*SRQ, bool) { return lookupNumbered(d, &d.srqs, n) }

// lookupNumbered finds the live object numbered num in one of the device's tables.
func lookupNumbered[T any](d *Device, table *numbers[T], num uint32) (T, bool) {
	defer hold(d, &d.tab).release()
	obj, ok := table.live[num]
	return obj, ok
}

// MR finds the registered MR whose current lkey/rkey is stag. A key whose key8 is not the
// current one (an old key of a fast-register MR re-registered by REG_MR, or a guess) finds
// nothing, nor does the index of a deregistered MR, nor a window's STag.
func (d *Device) MR(stag uint32) (*MR, bool) {
	defer hold(d, &d.tab).release()
	k := keys.Key(stag)
	mr, ok := d.mrs[k.Index()]
	if !ok || k.IsMW() {
		return nil, false
	}
	if _, err := d.keys.QueryMR(k); err != nil {
		return nil, false
	}
	return mr, true
}

// MW finds the allocated window whose current rkey in the device's key space is stag: the key
// its last executed bind gave it (a type 1 bind posted but not yet executed has not moved it).
// An earlier key8 finds nothing, nor does the index of a deallocated window, nor an MR's STag.
func (d *Device) MW(stag uint32) (*MW, bool) {
	defer hold(d, &d.tab).release()
	k := keys.Key(stag)
	mw, ok := d.mws[k.Index()]
	if !ok || !k.IsMW() {
		return nil, false
	}
	if _, err := d.keys.QueryMW(k); err != nil {
		return nil, false
	}
	return mw, true
}

// numbers hands out the numbers of one kind of object (CQs, SRQs) and finds the live object
// by its number. Numbers run from 1 (0 is never one, so a guest's zero names nothing) up to
// maxNumber, 24 bits as QPNs, CQNs and SRQNs are on real NICs; the next number is the one
// after the last handed out, wrapping to 1 and skipping numbers in use, so a number is never
// reused while its object lives, and one freed is reused only after the rest of the range
// has gone by (a guest still holding it meanwhile finds nothing, or the wrong object only
// after 2^24 creations).
type numbers[T any] struct {
	next uint32
	live map[uint32]T
}

const maxNumber = 1<<24 - 1

// alloc gives obj the next free number; false if all maxNumber are in use.
func (n *numbers[T]) alloc(obj T) (uint32, bool) {
	if len(n.live) >= maxNumber {
		return 0, false
	}
	for {
		if n.next == 0 || n.next > maxNumber {
			n.next = 1
		}
		num := n.next
		n.next++
		if _, used := n.live[num]; !used {
			n.live = put(n.live, num, obj)
			return num, true
		}
	}
}

// free forgets num.
func (n *numbers[T]) free(num uint32) { delete(n.live, num) }

// srcPort is the UDP source port for a QP, as rxe chooses it (rxe_qp_init_req): 0xC000 plus
// hash_32 of the QPN to 14 bits (the kernel's multiplicative hash), so flows spread over ECMP
// paths, each QP keeps one port, and a QP's frames carry the port rxe's would.
func srcPort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61C88647
	return 0xC000 | uint16((qpn*goldenRatio32)>>(32-14))
}

// loopback sits between the engine and its link and turns back the frames addressed to one of
// the device's own addresses (its IP, its IPs, whatever Receive would accept), as rxe does
// (rxe_net.c sends them to rxe_loopback instead of the netdev), so both ends of a connection
// can live on one device, as rdma-core's tests put them.
//
// A frame turned back is queued and delivered to Receive later, with the others queued by
// then, in one call scheduled on the device's clock with delay zero: never from inside the send (which may run while the
// device is busy with the Receive that produced the frame, and a reply sent from a nested
// Receive would recurse without bound). In the simulator each delivery is one event on the
// virtual clock, in the order the frames were sent, so a seed still means one trace; in real
// time (Host) the calls run on the clock's goroutine, one after the other, so the order is
// kept there too.
//
// Loopback frames never reach the link: a pcap of the link (the Fabric's or the Host's) does
// not show them, as tcpdump on the netdev does not show rxe's, and the fabric's loss, faults,
// latency and link-down do not apply to them. Stats.Loopback counts them.
type loopback struct {
	dev *Device

	mu        mutex[loopbackLock]
	queue     [][]byte // frames waiting for Receive, oldest first
	head      int
	batch     [][]byte     // the frames being delivered, kept to reuse
	free      [][]byte     // buffers to reuse
	nfree     atomic.Int32 // len(free), for Buffer to skip the lock on every frame of a device that never loops back
	scheduled bool         // a delivery is pending on the clock
	deliver   func()       // made once, so scheduling a delivery allocates nothing
}

// maxLoopbackFree bounds the loopback's pool of buffers.
const maxLoopbackFree = 256

// keep queues a copy of frame for the device.
func (lb *loopback) keep(frame []byte) {
	lb.mu.Lock()
	b := lb.bufferLocked()[:len(frame)]
	copy(b, frame)
	lb.mu.Unlock()
	lb.enqueue(b)
}

// buffer lends a buffer: one of the loopback's own if it has one (buffers circulate between
// the loopback and the link), else the link's, lender.
func (lb *loopback) buffer(lender BufferLink) []byte {
	if lb.nfree.Load() == 0 {
		return lender.Buffer()
	}
	lb.mu.Lock()
	if n := len(lb.free); n > 0 {
		b := lb.free[n-1]
		lb.free = lb.free[:n-1]
		lb.nfree.Store(int32(len(lb.free)))
		lb.mu.Unlock()
		return b[:MaxFrame]
	}
	lb.mu.Unlock()
	return lender.Buffer()
}

// take keeps a frame the engine sent to the device itself: a buffer the link lent is queued
// as it is, one of the device's own is copied (the device reuses it).
func (lb *loopback) take(b []byte, lent bool) {
	if !lent {
		lb.mu.Lock()
		c := lb.bufferLocked()[:len(b)]
		copy(c, b)
		lb.mu.Unlock()
		b = c
	}
	lb.enqueue(b)
}

// local says whether frame is a RoCEv2 frame the device sends to one of its own addresses.
func (lb *loopback) local(frame []byte) bool {
	ip, ok := frameDstIP(frame)
	return ok && lb.dev.owns(ip)
}

func (lb *loopback) bufferLocked() []byte {
	if n := len(lb.free); n > 0 {
		b := lb.free[n-1]
		lb.free = lb.free[:n-1]
		lb.nfree.Store(int32(len(lb.free)))
		return b[:cap(b)]
	}
	return NewFrameBuffer(MaxFrame)
}

// enqueue queues a frame for the device and makes sure a delivery is scheduled. The device
// counted it (and told its event sink) when the engine sent it (see Device.send).
func (lb *loopback) enqueue(b []byte) {
	d := lb.dev
	lb.mu.Lock()
	lb.queue = append(lb.queue, b)
	post := !lb.scheduled
	lb.scheduled = true
	lb.mu.Unlock()
	if post {
		d.clock.Post(0, lb.deliver)
	}
}

// deliverLoopback hands the oldest queued frame to Receive, with no lock of the engine held,
// and schedules the next delivery if more are waiting.
func (d *Device) deliverLoopback() {
	lb := &d.loop
	lb.mu.Lock()
	if lb.head == len(lb.queue) {
		lb.scheduled = false
		lb.mu.Unlock()
		return
	}
	// Everything queued now goes in one batch, as frames arriving together off a link do;
	// frames the batch makes the device send to itself wait for the next delivery.
	batch := append(lb.batch[:0], lb.queue[lb.head:]...)
	clear(lb.queue[lb.head:])
	lb.queue, lb.head = lb.queue[:0], 0
	lb.mu.Unlock()

	if tap := d.looped.Load(); tap != nil {
		for _, b := range batch {
			(*tap)(b)
		}
	}
	d.ReceiveBatch(batch)

	lb.mu.Lock()
	for i, b := range batch {
		if len(lb.free) < maxLoopbackFree && cap(b) >= MaxFrame {
			lb.free = append(lb.free, b)
		}
		batch[i] = nil
	}
	lb.nfree.Store(int32(len(lb.free)))
	lb.batch = batch[:0]
	more := lb.head < len(lb.queue)
	lb.scheduled = more
	lb.mu.Unlock()
	if more {
		d.clock.Post(0, lb.deliver)
	}
}

// frameDstIP reads the destination IP address of an Ethernet frame carrying IPv4 or IPv6.
func frameDstIP(b []byte) (netip.Addr, bool) {
	off := 12
	if len(b) >= 14 && binary.BigEndian.Uint16(b[12:]) == roce.EtherTypeVLAN {
		off = 16
	}
	if len(b) < off+2 {
		return netip.Addr{}, false
	}
	ip := b[off+2:]
	switch binary.BigEndian.Uint16(b[off:]) {
	case roce.EtherTypeIPv4:
		if len(ip) >= 20 {
			return netip.AddrFrom4([4]byte(ip[16:20])), true
		}
	case roce.EtherTypeIPv6:
		if len(ip) >= 40 {
			return netip.AddrFrom16([16]byte(ip[24:40])), true
		}
	}
	return netip.Addr{}, false
}
