package sim

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/internal/pcapfile"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// LinkConfig is a simulated link's behaviour: every frame a device sends through it takes
// Latency to arrive and meets each fault with its probability.
type LinkConfig struct {
	Latency   time.Duration // one way; 0 means 1 us
	Loss      float64       // frame dropped
	Duplicate float64       // frame delivered twice
	Reorder   float64       // frame held back by ReorderDelay, so later frames overtake it
	Corrupt   float64       // a bit flipped after the ICRC was computed (the receiver drops it)
	// ReorderDelay is how long a reordered frame is held; 0 means 5 x Latency.
	ReorderDelay time.Duration
	// Rate is the link's speed in bits per second; frames queue behind each other at it.
	// 0 means infinitely fast (every frame takes just Latency).
	Rate float64
}

// Validate says whether the simulator can run the link as it is: every probability from 0 to 1,
// no negative latency or reorder delay, a rate of zero or more (none NaN). The error, EINVAL,
// names the first field that is not.
func (c LinkConfig) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Loss", c.Loss}, {"Duplicate", c.Duplicate}, {"Reorder", c.Reorder}, {"Corrupt", c.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) { // NaN fails both
			return fmt.Errorf("sim: link %s %v is not a probability from 0 to 1: %w", p.name, p.v, syscall.EINVAL)
		}
	}
	switch {
	case c.Latency < 0:
		return fmt.Errorf("sim: link Latency %v is negative: %w", c.Latency, syscall.EINVAL)
	case c.ReorderDelay < 0:
		return fmt.Errorf("sim: link ReorderDelay %v is negative: %w", c.ReorderDelay, syscall.EINVAL)
	case !(c.Rate >= 0):
		return fmt.Errorf("sim: link Rate %v bits per second is not a speed (0 for no limit): %w", c.Rate, syscall.EINVAL)
	}
	return nil
}

// random says whether the link has a random fault: it draws random numbers for every frame.
func (c LinkConfig) random() bool {
	return c.Loss > 0 || c.Duplicate > 0 || c.Reorder > 0 || c.Corrupt > 0
}

// clamped is c brought into range as AddDevice and SetLink take it: a probability above 1 is 1,
// one below 0 or NaN is 0; a negative latency, reorder delay or rate, or a NaN rate, is 0, which
// means its default.
func (c LinkConfig) clamped() LinkConfig {
	for _, p := range []*float64{&c.Loss, &c.Duplicate, &c.Reorder, &c.Corrupt} {
		switch {
		case *p > 1:
			*p = 1
		case !(*p >= 0):
			*p = 0
		}
	}
	c.Latency, c.ReorderDelay = max(c.Latency, 0), max(c.ReorderDelay, 0)
	if !(c.Rate >= 0) {
		c.Rate = 0
	}
	return c
}

func (c LinkConfig) withDefaults() LinkConfig {
	c = c.clamped()
	if c.Latency == 0 {
		c.Latency = time.Microsecond
	}
	if c.ReorderDelay == 0 {
		c.ReorderDelay = 5 * c.Latency
	}
	return c
}

// FaultAction is what a targeted fault does to the frames it matches.
type FaultAction = faultplan.Action

const (
	FaultDrop      = faultplan.Drop
	FaultDuplicate = faultplan.Duplicate
	FaultCorrupt   = faultplan.Corrupt
	FaultDelay     = faultplan.Delay
)

// Fault is a targeted fault (wire/faultplan, which serve's fabric runs too): it matches frames by
// sender, opcode, destination QP and PSN, and fires on the Nth match, or on every match, within
// a time window of virtual time. Every firing is an EvFault event, so a test can prove its fault
// happened.
type Fault = faultplan.Fault

// Fabric is the simulator's network: a switch joining any number of devices, each through a
// link with its own faults, all driven by one Sim and one seeded random source. It can write
// every frame that enters the wire to a pcap, with timestamps in virtual time.
type Fabric struct {
	sim    *Sim
	rnd    *mrand.Rand
	seed   uint64
	ports  []*fabricPort
	byMAC  map[uint64]*fabricPort // by macKey
	byIP   map[netip.Addr]*fabricPort
	faults []*Fault
	events engine.EventSink
	pcap   *pcapfile.Writer
	epoch  time.Time
	free   [][]byte // frame buffers to reuse
	window int      // the send window of devices added from now on (engine.DeviceConfig.SendWindow)
	// deliveries to reuse
	deliveries []*delivery
}

type fabricPort struct {
	fab      *Fabric
	dev      *engine.Device
	cfg      LinkConfig
	downFrom time.Duration
	downTo   time.Duration
	busy     time.Duration // when the link finishes sending what it has queued
	open     *delivery     // the latest delivery scheduled to the port, which frames due with it join
	stats    LinkStats
}

// LinkStats counts what crossed one device's simulated link. A device's frames to itself never
// do: it turns them back before the link (see loopback), so they are in neither these counts
// nor the fabric's pcap, and the link's loss and faults never touch them.
type LinkStats struct {
	TxFrames, TxBytes uint64 // frames the device put on the link
	RxFrames, RxBytes uint64 // frames the link delivered to the device
}

// LinkStats reports what crossed dev's link; zero for a device not on the fabric.
func (f *Fabric) LinkStats(dev *engine.Device) LinkStats {
	if p := f.portOf(dev); p != nil {
		return p.stats
	}
	return LinkStats{}
}

// NewFabric makes an empty fabric on sim. Everything random in it, and in the devices it makes,
// comes from seed.
func NewFabric(sim *Sim, seed uint64) *Fabric {
	return &Fabric{
		sim:   sim,
		rnd:   mrand.New(mrand.NewPCG(seed, 0x5eed)),
		seed:  seed,
		byMAC: map[uint64]*fabricPort{},
		byIP:  map[netip.Addr]*fabricPort{},
		epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

// Sim is the fabric's simulator.
func (f *Fabric) Sim() *Sim { return f.sim }

// OnEvent sends the events of the fabric and of its devices to sink; nil turns them off (and
// saves the engine the work of describing what it does).
func (f *Fabric) OnEvent(sink engine.EventSink) {
	f.events = sink
	for _, p := range f.ports {
		p.dev.SetEventSink(f.deviceSink())
	}
}

func (f *Fabric) deviceSink() engine.EventSink {
	if f.events == nil {
		return nil
	}
	return f.emit
}

// CapturePcap writes every frame that enters the wire, from every device, to w as a pcap. A
// device's frames to itself do not enter the wire and are not written. A frame w does not take
// stops the capture: that is logged once, as a warning on slog's default logger, and CaptureErr
// says how many frames are missing.
func (f *Fabric) CapturePcap(w io.Writer) error {
	pw, err := pcapfile.New(w, nil)
	if err != nil {
		return err
	}
	f.pcap = pw
	return nil
}

// CaptureErr is nil while the pcap holds every frame that entered the wire (or there is none);
// otherwise it says from which frame on and how many are missing, and why the first is.
func (f *Fabric) CaptureErr() error {
	if f.pcap == nil {
		return nil
	}
	return f.pcap.Err()
}

// AddDevice makes a device on the fabric with the next address (MAC 02:00:00:00:00:NN, IP
// 192.0.2.NN), a random source drawn from the fabric's, and a link with cfg.
//
// AddDevice refuses nothing: it clamps a link out of range (a probability above 1 is 1, a
// negative one or NaN is 0, a negative latency, reorder delay or rate is 0, its default) and
// takes a name already on the fabric as it is (a fault or event naming it then means both
// devices). AddDeviceChecked refuses both with an error.
func (f *Fabric) AddDevice(name string, cfg LinkConfig) *engine.Device {
	mac, ip := f.nextAddress()
	return f.AddDeviceAt(name, mac, ip, cfg)
}

// SetSendWindow gives the devices added from now on a send window of n PSNs
// (engine.DeviceConfig.SendWindow, which says what it takes); devices already on the fabric
// keep theirs.
func (f *Fabric) SetSendWindow(n int) { f.window = n }

// nextAddress is the address of the next device AddDevice makes.
func (f *Fabric) nextAddress() ([6]byte, netip.Addr) {
	n := len(f.ports) + 1
	mac := [6]byte{0x02, 0, 0, 0, byte(n >> 8), byte(n)}
	ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(n)})
	if n > 254 {
		ip = netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)})
	}
	return mac, ip
}

// maxDevices is how many devices AddDevice has addresses for.
const maxDevices = 0xffff

// AddDeviceChecked is AddDevice refusing what AddDevice takes as it is: a link that fails
// Validate, an empty name or one already on the fabric, a fabric with no addresses left (65535
// devices), a nil fabric or one without a simulator. The error wraps EINVAL; a refusal adds
// nothing.
func (f *Fabric) AddDeviceChecked(name string, cfg LinkConfig) (*engine.Device, error) {
	if f != nil && len(f.ports) >= maxDevices {
		return nil, fmt.Errorf("sim: add device %q: the fabric has %d devices, all its addresses: %w", name, len(f.ports), syscall.EINVAL)
	}
	var mac [6]byte
	var ip netip.Addr
	if f != nil {
		mac, ip = f.nextAddress()
	}
	return f.AddDeviceAtChecked(name, mac, ip, cfg)
}

// AddDeviceAtChecked is AddDeviceAt with the checks of AddDeviceChecked, and of the addresses:
// a unicast MAC and IP address, neither another device's on the fabric.
func (f *Fabric) AddDeviceAtChecked(name string, mac [6]byte, ip netip.Addr, cfg LinkConfig) (*engine.Device, error) {
	if err := f.checkDevice(name, mac, ip, cfg); err != nil {
		return nil, fmt.Errorf("sim: add device %q: %w", name, err)
	}
	return f.AddDeviceAt(name, mac, ip, cfg), nil
}

// checkDevice says what is wrong with a device to add, if anything.
func (f *Fabric) checkDevice(name string, mac [6]byte, ip netip.Addr, cfg LinkConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, syscall.EINVAL)...)
	}
	switch {
	case f == nil:
		return bad("the fabric is nil")
	case f.sim == nil:
		return bad("the fabric has no simulator (NewFabric was given nil)")
	case name == "":
		return bad("a device needs a name")
	case mac[0]&1 != 0 || mac == [6]byte{}:
		return bad("MAC %s is not a unicast address", net.HardwareAddr(mac[:]))
	case !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast():
		return bad("IP %s is not a unicast address", ip)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, p := range f.ports {
		switch {
		case p.dev.Name() == name:
			return bad("the fabric has a device named %q", name)
		case p.dev.MAC() == mac:
			return bad("MAC %s is device %q's", net.HardwareAddr(mac[:]), p.dev.Name())
		case p.dev.IP().Unmap() == ip.Unmap():
			return bad("IP %s is device %q's", ip.Unmap(), p.dev.Name())
		}
	}
	return nil
}

// AddDeviceAt makes a device with the given addresses. Like AddDevice it refuses nothing (it
// clamps the link, and takes addresses already on the fabric: frames to them reach the device
// added last); AddDeviceAtChecked refuses.
func (f *Fabric) AddDeviceAt(name string, mac [6]byte, ip netip.Addr, cfg LinkConfig) *engine.Device {
	p := &fabricPort{fab: f, cfg: cfg.withDefaults()}
	dev := engine.NewDevice(engine.DeviceConfig{
		Name: name, Clock: f.sim, Rand: mrand.NewPCG(f.rnd.Uint64(), f.rnd.Uint64()), MAC: mac, IP: ip,
		Events:     f.deviceSink(),
		Resolve:    f.resolve,
		SendWindow: f.window,
	})
	p.dev = dev
	dev.Attach(p)
	f.ports = append(f.ports, p)
	f.byMAC[macKey(mac[:])] = p
	f.byIP[ip.Unmap()] = p
	return dev
}

// SetLink changes a device's link behaviour. It clamps a link out of range as AddDevice does,
// and does nothing for a device not on the fabric; SetLinkChecked refuses both.
func (f *Fabric) SetLink(dev *engine.Device, cfg LinkConfig) {
	if p := f.portOf(dev); p != nil {
		p.cfg = cfg.withDefaults()
	}
}

// SetLinkChecked is SetLink refusing, with an error wrapping EINVAL, a link that fails Validate
// and a device that is nil or not on the fabric.
func (f *Fabric) SetLinkChecked(dev *engine.Device, cfg LinkConfig) error {
	if dev == nil {
		return fmt.Errorf("sim: set link: the device is nil: %w", syscall.EINVAL)
	}
	if f == nil || f.portOf(dev) == nil {
		return fmt.Errorf("sim: set link of %q: the device is not on this fabric: %w", dev.Name(), syscall.EINVAL)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("sim: set link of %q: %w", dev.Name(), err)
	}
	f.SetLink(dev, cfg)
	return nil
}

// LinkDown takes a device's link down from now for d: every frame it sends or is sent is lost.
func (f *Fabric) LinkDown(dev *engine.Device, d time.Duration) {
	if p := f.portOf(dev); p != nil {
		now := f.sim.Now()
		p.downFrom, p.downTo = now, now+d
		f.emit(engine.Event{T: now, Device: dev.Name(), Kind: engine.EvFault, Msg: fmt.Sprintf("link down for %v", d)})
	}
}

// AddFault adds a targeted fault.
func (f *Fabric) AddFault(ft Fault) *Fault {
	p := &ft
	if p.Nth == 0 && p.Count == 0 && p.Name == "" {
		p.Name = p.Action.String()
	}
	f.faults = append(f.faults, p)
	return p
}

func (f *Fabric) portOf(dev *engine.Device) *fabricPort {
	for _, p := range f.ports {
		if p.dev == dev {
			return p
		}
	}
	return nil
}

func (f *Fabric) resolve(ip netip.Addr) ([6]byte, bool) {
	p, ok := f.byIP[ip.Unmap()]
	if !ok {
		return [6]byte{}, false
	}
	return p.dev.MAC(), true
}

func (f *Fabric) emit(e engine.Event) {
	if f.events != nil {
		if e.T == 0 {
			e.T = f.sim.Now()
		}
		f.events(e)
	}
}

func (p *fabricPort) down(now time.Duration) bool { return now >= p.downFrom && now < p.downTo }

// Send is the device's side of its link: the frame is copied, meets the faults, and is
// delivered to the device owning its destination MAC after the link's latency.
func (p *fabricPort) Send(frame []byte) error {
	buf := p.fab.buffer(len(frame))
	copy(buf, frame)
	p.SendBuffer(buf)
	return nil
}

// Buffer lends the device a frame buffer from the fabric's pool.
func (p *fabricPort) Buffer() []byte { return p.fab.buffer(engine.MaxFrame) }

// SendBuffer carries a frame built in a buffer from Buffer, without copying it; nil returns
// an unused buffer.
func (p *fabricPort) SendBuffer(buf []byte) { p.sendBuffer(buf, false, p.looked()) }

// SendSealed is SendBuffer for a frame the engine sealed: delivered untouched, it reaches the
// other device sealed (engine.ReceiveSealed), and its ICRC is not computed twice; a corrupting
// fault or link takes that away.
func (p *fabricPort) SendSealed(buf []byte) { p.sendBuffer(buf, true, p.looked()) }

// SendUnsealed is SendSealed for a frame whose ICRC the engine left to the fabric
// (engine.UnsealedLink). The fabric seals it when anything may read it: a capture, a fault, a
// lossy or corrupting link. A frame that meets none of them goes to the other device untouched,
// whose sealed receive never reads the ICRC, so it is never computed.
func (p *fabricPort) SendUnsealed(buf []byte) {
	if buf == nil {
		return
	}
	looked := p.looked()
	if looked {
		_ = roce.SealFrame(buf) // an engine's frame: it parses
	}
	p.sendBuffer(buf, true, looked)
}

// looked says whether anything on the way reads or changes the port's frames: the fabric's
// capture, a targeted fault, a random fault of the link.
func (p *fabricPort) looked() bool {
	f := p.fab
	return f.pcap != nil || len(f.faults) > 0 || p.cfg.random()
}

// sendBuffer sends buf; looked is p.looked(), which its caller has asked already.
func (p *fabricPort) sendBuffer(buf []byte, sealed, looked bool) {
	f := p.fab
	if buf == nil {
		return
	}
	now := f.sim.Now()
	p.stats.TxFrames++
	p.stats.TxBytes += uint64(len(buf))
	delay := p.cfg.Latency
	if p.cfg.Rate > 0 {
		// Serialisation: the frame waits for the ones before it, then takes its own time
		// (with Ethernet's preamble, SFD, FCS and inter-frame gap: 24 bytes).
		start := max(now, p.busy)
		p.busy = start + time.Duration(float64(len(buf)+24)*8/p.cfg.Rate*1e9)
		delay += p.busy - now
	}
	copies, changed := 1, false
	if looked {
		copies, delay, changed = p.faults(buf, now, delay)
	}
	if p.down(now) {
		copies = 0
	}
	p.forward(buf, now, copies, delay, sealed && !changed)
}

// faults runs the fabric's targeted faults and then the link's random ones over a frame sent at
// now, capturing it as they leave it: how many copies go on, after how long, and whether a
// corruption changed it.
func (p *fabricPort) faults(buf []byte, now, delay time.Duration) (int, time.Duration, bool) {
	f := p.fab
	copies, changed := 1, false
	var info faultplan.Frame
	random := p.cfg.random()
	if len(f.faults) > 0 || random {
		info = faultplan.ParseFrame(buf) // what faults match on and report; a clean link needs none of it
	}
	ev := func(msg string) {
		f.emit(engine.Event{T: now, Device: p.dev.Name(), QP: info.DestQP, PSN: info.PSN, Kind: engine.EvFault, Msg: msg})
	}
	// Targeted faults first, then the link's random ones, always drawing the random numbers in
	// the same order so a seed means the same thing whatever fires. A link with no random fault
	// draws none, so traffic on clean links leaves the frames a lossy one loses as they were
	// (and costs four draws a frame less); which links draw depends on their settings alone,
	// never on what fired, so a seed still gives one trace.
	for _, ft := range f.faults {
		var fired bool
		if copies, delay, fired = ft.Take(p.dev.Name(), &info, buf, now, copies, delay); fired {
			changed = changed || ft.ChangesFrames()
			ev(fmt.Sprintf("fault %q: %s %s psn %d", ft.Name, ft.Action, info.Op, info.PSN))
		}
	}
	rl, rd, rr, rc := 1.0, 1.0, 1.0, 1.0 // below no probability (none exceeds 1): nothing fires
	if random {
		rl, rd, rr, rc = f.rnd.Float64(), f.rnd.Float64(), f.rnd.Float64(), f.rnd.Float64()
	}
	if rc < p.cfg.Corrupt {
		faultplan.CorruptFrame(buf, info.PayloadOff)
		changed = true
		ev(fmt.Sprintf("link corrupted %s psn %d", info.Op, info.PSN))
	}
	f.capture(now, buf)
	if rl < p.cfg.Loss {
		copies = 0
		ev(fmt.Sprintf("link lost %s psn %d", info.Op, info.PSN))
	}
	if copies > 0 && rd < p.cfg.Duplicate {
		copies++
		ev(fmt.Sprintf("link duplicated %s psn %d", info.Op, info.PSN))
	}
	if copies > 0 && rr < p.cfg.Reorder {
		delay += p.cfg.ReorderDelay
		ev(fmt.Sprintf("link reordered %s psn %d", info.Op, info.PSN))
	}
	return copies, delay, changed
}

// forward delivers copies of a frame sent at now after delay: to every other port for an
// Ethernet group address, else to the port of its destination MAC; the buffer goes back to the
// pool if no delivery takes it. sealed says the frame is an engine's, sealed and untouched.
func (p *fabricPort) forward(buf []byte, now time.Duration, copies int, delay time.Duration, sealed bool) {
	f := p.fab
	if len(buf) >= 6 && buf[0]&1 != 0 && copies > 0 {
		// An Ethernet group address (multicast, broadcast): every other port gets a copy,
		// in the order they joined the fabric, and keeps what its device listens for.
		for _, q := range f.ports {
			if q == p || q.down(now) {
				continue
			}
			for range copies {
				b := f.buffer(len(buf))
				copy(b, buf)
				f.deliver(q, b, now, delay, sealed)
			}
		}
		f.release(buf)
		return
	}
	var dst *fabricPort
	if len(buf) >= 6 {
		dst = f.byMAC[macKey(buf[0:6])]
	}
	if dst == nil || copies == 0 {
		f.release(buf)
		return
	}
	for i := 0; i < copies; i++ {
		b := buf
		if i > 0 {
			b = f.buffer(len(buf))
			copy(b, buf)
		}
		f.deliver(dst, b, now, delay, sealed)
	}
}

// delivery is a frame on its way; deliveries are reused, with their run func made once, so a
// frame in flight costs no allocation.
// delivery is the frames that reach one port at one instant, in the order they were sent: a
// burst (a requester's run, a READ's responses) is one event on the simulator and one hold of
// the receiving device's lock instead of one of each per frame.
type delivery struct {
	f      *Fabric
	dst    *fabricPort
	at     time.Duration
	bufs   [][]byte
	sealed []bool // of each of bufs: an engine's frame, sealed and untouched
	run    func()
}

// deliver schedules b to reach dst after delay, with the frames already due there then.
func (f *Fabric) deliver(dst *fabricPort, b []byte, now, delay time.Duration, sealed bool) {
	if dl := dst.open; dl != nil && dl.at == now+delay {
		dl.bufs = append(dl.bufs, b)
		dl.sealed = append(dl.sealed, sealed)
		return
	}
	dl := f.delivery()
	dl.dst, dl.at = dst, now+delay
	dl.bufs = append(dl.bufs[:0], b)
	dl.sealed = append(dl.sealed[:0], sealed)
	dst.open = dl
	f.sim.Post(delay, dl.run)
}

func (f *Fabric) delivery() *delivery {
	if n := len(f.deliveries); n > 0 {
		dl := f.deliveries[n-1]
		f.deliveries = f.deliveries[:n-1]
		return dl
	}
	dl := &delivery{f: f}
	dl.run = func() {
		dst := dl.dst
		if dst.open == dl {
			dst.open = nil
		}
		if !dst.down(f.sim.Now()) {
			for _, b := range dl.bufs {
				dst.stats.RxFrames++
				dst.stats.RxBytes += uint64(len(b))
			}
			dst.dev.ReceiveSealed(dl.bufs, dl.sealed)
		}
		for i, b := range dl.bufs {
			f.release(b)
			dl.bufs[i] = nil
		}
		dl.dst, dl.bufs, dl.sealed = nil, dl.bufs[:0], dl.sealed[:0]
		f.deliveries = append(f.deliveries, dl)
	}
	return dl
}

// macKey is a MAC address as a map key that hashes in one step (a [6]byte key hashes as bytes,
// a cost per frame).
func macKey(mac []byte) uint64 {
	return uint64(mac[0])<<40 | uint64(mac[1])<<32 | uint64(mac[2])<<24 | uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

func (f *Fabric) buffer(n int) []byte {
	if k := len(f.free); k > 0 {
		b := f.free[k-1]
		f.free = f.free[:k-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return engine.NewFrameBuffer(max(n, engine.MaxFrame))[:n]
}

func (f *Fabric) release(b []byte) {
	if len(f.free) < 1024 {
		f.free = append(f.free, b)
	}
}

func (f *Fabric) capture(now time.Duration, frame []byte) {
	if f.pcap == nil {
		return
	}
	f.pcap.Write(f.epoch.Add(now), frame)
	f.pcap.Flush()
}
