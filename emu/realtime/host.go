// Package realtime runs the engine in wall-clock time: WallClock, the engine's clock for real
// mode, and Host, one device on a real link (a QEMU socket, AF_PACKET on an adapter) with the
// ARP and neighbour discovery that link needs and an optional pcap.
package realtime

import (
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softirdma/softirdma/wire/roce"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/internal/pcapfile"
	"github.com/softirdma/softirdma/wire/neigh"
)

// HostConfig sets up a Host.
type HostConfig struct {
	Name string
	Link roce.Link
	MAC  [6]byte
	// IP is the device's RoCE address; IPs are more it owns (an IPv6 link-local one, say).
	// The host answers ARP and neighbour solicitations for all of them.
	IP  netip.Addr
	IPs []netip.Addr
	// Prefixes are ranges the device answers on as its own (engine.DeviceConfig.Prefixes);
	// the host answers no neighbour requests for them.
	Prefixes []netip.Prefix
	// Answer says whether the host answers ARP/ND itself. On a socket link to a guest it must
	// (nobody else will); on an adapter whose kernel owns the address the kernel does.
	Answer bool
	// Resolve overrides neighbour resolution (the kernel's table on an adapter).
	Resolve func(netip.Addr) ([6]byte, bool)
	Rand    mrand.Source
	Events  engine.EventSink
	// ActiveMTU is the device's port MTU, the largest datagram its UD QPs send (0: 4096). A
	// peer on a 1500-byte Ethernet link has 1024, as rxe derives it from its netdev's MTU.
	ActiveMTU engine.MTU
	// SendWindow is the device's send window (engine.DeviceConfig.SendWindow; 0: rxe's).
	SendWindow int
	// RxLoss drops this fraction of the RoCE frames received, before the device sees them:
	// a fault to meet a real peer's retransmissions with.
	RxLoss float64
	// Pcap, if set, receives every frame sent and received on the link. Frames the device
	// sends to one of its own addresses never reach the link (the device loops them back), so
	// they are not in it, as tcpdump on rxe's netdev does not see rxe's loopback. A frame Pcap
	// does not take stops the capture: that is logged once, as a warning on slog's default
	// logger, and the host's CaptureErr says how many frames are missing.
	Pcap io.Writer
	// Tap, if set, is called with every frame sent and received on the link, as Pcap gets
	// them, under the host's lock: it must copy what it keeps and not call back into the host.
	Tap func(frame []byte)
}

// Host runs a device on a real link, outside the simulator: the wall clock, a goroutine that
// takes frames off the link, neighbour resolution, and an optional pcap of both directions.
type Host struct {
	cfg HostConfig
	dev atomic.Pointer[engine.Device]
	// resolveFn is the device's neighbour resolution, kept for the devices Rebind makes.
	resolveFn func(netip.Addr) ([6]byte, bool)
	resp      *neigh.Responder
	mu        sync.Mutex // serialises sends and the pcap
	one       [1][]byte  // the batch of one frame send hands the link, kept: no allocation per frame
	pcap      *pcapfile.Writer
	loss      *mrand.Rand
	rxLoss    atomic.Uint64 // the fraction of RoCE frames to drop, as float64 bits: RxLoss until SetRxLoss
	done      chan struct{}
	err       error
	stats     HostStats
}

// HostStats counts what the host did besides the device's own work.
type HostStats struct {
	NeighborFrames, NeighborReplies, Dropped, LossInjected uint64
}

// NewHost makes a device on the link. Call Run (usually in a goroutine) to start receiving.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.Link == nil || !cfg.IP.IsValid() {
		return nil, errors.New("host: a link and an IP address are needed")
	}
	h := &Host{cfg: cfg, done: make(chan struct{})}
	h.resp = &neigh.Responder{MAC: cfg.MAC, IPs: append([]netip.Addr{cfg.IP}, cfg.IPs...), Table: neigh.NewTable()}
	if cfg.Pcap != nil {
		pw, err := pcapfile.New(cfg.Pcap, nil)
		if err != nil {
			return nil, err
		}
		h.pcap = pw
	}
	src := cfg.Rand
	if src == nil {
		src = mrand.NewPCG(uint64(time.Now().UnixNano()), 1)
	}
	h.loss = mrand.New(mrand.NewPCG(mrand.New(src).Uint64(), 2))
	h.SetRxLoss(cfg.RxLoss)
	resolve := cfg.Resolve
	if resolve == nil {
		resolve = h.resolve
	}
	h.resolveFn = resolve
	dev := engine.NewDevice(engine.DeviceConfig{Name: cfg.Name, Clock: NewWallClock(), Rand: src, MAC: cfg.MAC, IP: cfg.IP, IPs: cfg.IPs,
		Prefixes: cfg.Prefixes, Events: cfg.Events, Resolve: resolve, ActiveMTU: cfg.ActiveMTU, SendWindow: cfg.SendWindow})
	dev.Attach(h.engineLink())
	h.dev.Store(dev)
	return h, nil
}

// Rebind gives the host a new device with the link address and IP addresses given, in place
// of the one it has, which stops: a device model whose driver programs its addresses (a MAC, a
// GID table) makes its engine this way. Frames from the link go to the new device from now
// on, and the host answers neighbour requests for the new addresses.
func (h *Host) Rebind(mac [6]byte, ip netip.Addr, ips []netip.Addr) *engine.Device {
	dev := engine.NewDevice(engine.DeviceConfig{Name: h.cfg.Name, Clock: NewWallClock(), MAC: mac, IP: ip, IPs: ips,
		Prefixes: h.cfg.Prefixes, Events: h.cfg.Events, Resolve: h.resolveFn, ActiveMTU: h.cfg.ActiveMTU,
		SendWindow: h.cfg.SendWindow})
	dev.Attach(h.engineLink())
	h.mu.Lock()
	h.resp.MAC, h.resp.IPs = mac, append([]netip.Addr{ip}, ips...)
	old := h.dev.Swap(dev)
	h.mu.Unlock()
	old.Stop()
	return dev
}

// SetAddresses changes the addresses of the host's device in place (Device.SetAddresses) and
// the ones the host answers neighbour requests for: a driver reprogramming a running device.
func (h *Host) SetAddresses(mac [6]byte, ip netip.Addr, ips []netip.Addr) {
	h.mu.Lock()
	h.resp.MAC, h.resp.IPs = mac, append([]netip.Addr{ip}, ips...)
	dev := h.dev.Load()
	h.mu.Unlock()
	dev.SetAddresses(mac, ip, ips)
}

// Device is the host's device.
func (h *Host) Device() *engine.Device { return h.dev.Load() }

// Neighbors is the host's table of learned link addresses.
func (h *Host) Neighbors() *neigh.Table { return h.resp.Table }

// SetRxLoss changes the fraction of the RoCE frames received that the host drops (RxLoss).
func (h *Host) SetRxLoss(p float64) { h.rxLoss.Store(math.Float64bits(p)) }

// Stats reports what the host did.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// resolve waits up to three seconds for ip's link address, asking every 200 ms.
func (h *Host) resolve(ip netip.Addr) ([6]byte, bool) {
	return h.resp.Table.Wait(ip, 3*time.Second, 200*time.Millisecond, func() {
		h.mu.Lock()
		req := h.resp.Request(nil, ip)
		h.mu.Unlock()
		if len(req) > 0 {
			h.send(req)
		}
	})
}

type hostLink struct{ h *Host }

func (l hostLink) Send(frame []byte) error { return l.h.send(frame) }

// SendFrames sends what the device has waiting in one SendBatch (a socket link's sendmmsg).
func (l hostLink) SendFrames(frames [][]byte) {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.sendLocked(frames)
}

// bufferLender is a link that lends frame buffers and takes frames built in them back without
// a copy (wire/ethswitch's ports): the device then builds its frames where the link carries
// them.
type bufferLender interface {
	Buffer() []byte
	SendBuffer(frame []byte)
}

// lendingHostLink is the host's link for a device when the host's link lends buffers.
type lendingHostLink struct {
	hostLink
	lender bufferLender
}

func (l lendingHostLink) Buffer() []byte { return l.lender.Buffer() }

func (l lendingHostLink) SendBuffer(frame []byte) { l.h.hand(frame, l.lender.SendBuffer) }

// hand captures a frame built in a lent buffer (nil: a buffer given back unused) and hands it
// to send, the lender's, under the host's lock.
func (h *Host) hand(frame []byte, send func([]byte)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if frame != nil {
		h.capture(frame)
	}
	send(frame)
}

// sealer is a lending link that carries word that a frame is sealed (wire/ethswitch's ports).
type sealer interface {
	bufferLender
	SendSealed(frame []byte)
}

// sealingHostLink is the host's link for a device when the host's link also carries sealed
// frames (engine.SealedLink).
type sealingHostLink struct {
	lendingHostLink
	sealer sealer
}

func (l sealingHostLink) SendSealed(frame []byte) { l.h.hand(frame, l.sealer.SendSealed) }

// sealedBatcher is a sealer that takes sealed frames in batches (wire/ethswitch's ports).
type sealedBatcher interface {
	sealer
	SendSealedBatch(frames [][]byte)
}

// batchSealingHostLink is sealingHostLink for a link that takes sealed frames in batches
// (engine.SealedBatchLink): the host's lock, too, is taken once a batch.
type batchSealingHostLink struct {
	sealingHostLink
	batcher sealedBatcher
}

func (l batchSealingHostLink) SendSealedBatch(frames [][]byte) {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range frames {
		if f != nil {
			h.capture(f)
		}
	}
	l.batcher.SendSealedBatch(frames)
}

// sealedReceiver is a link that says which frames it hands over are sealed.
type sealedReceiver interface {
	RecvBatchSealed(bufs [][]byte, sizes []int, sealed []bool) (int, error)
}

// engineLink is what the host's device sends through: one that lends buffers if the host's
// link does, and says which frames are sealed if the link carries that.
func (h *Host) engineLink() engine.Link {
	if b, ok := h.cfg.Link.(sealedBatcher); ok {
		return batchSealingHostLink{sealingHostLink{lendingHostLink{hostLink{h}, b}, b}, b}
	}
	if s, ok := h.cfg.Link.(sealer); ok {
		return sealingHostLink{lendingHostLink{hostLink{h}, s}, s}
	}
	if lender, ok := h.cfg.Link.(bufferLender); ok {
		return lendingHostLink{hostLink{h}, lender}
	}
	return hostLink{h}
}

func (h *Host) send(frame []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.one[0] = frame
	err := h.sendLocked(h.one[:])
	h.one[0] = nil
	return err
}

// sendLocked captures the frames and sends them in one SendBatch. h.mu is held.
func (h *Host) sendLocked(frames [][]byte) error {
	for _, f := range frames {
		h.capture(f)
	}
	_, err := h.cfg.Link.SendBatch(frames)
	return err
}

func (h *Host) capture(frame []byte) {
	if h.cfg.Tap != nil {
		h.cfg.Tap(frame)
	}
	if h.pcap != nil {
		h.pcap.Write(time.Now(), frame)
		h.pcap.Flush()
	}
}

// CaptureErr is nil while the pcap (HostConfig.Pcap) holds every frame sent and received (or
// there is none); otherwise it says from which frame on and how many are missing, and why the
// first is.
func (h *Host) CaptureErr() error {
	if h.pcap == nil {
		return nil
	}
	return h.pcap.Err()
}

// Run receives until the link fails or is closed, and returns why.
func (h *Host) Run() error {
	defer close(h.done)
	const batch = 32
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = engine.NewFrameBuffer(roce.MaxFrameLen)
	}
	sizes := make([]int, batch)
	sealed := make([]bool, batch)
	// What the batch holds for the device, in order, handed over in one call after the batch:
	// the frames it makes the device send go out together, as a NIC's answers to a burst do.
	rx, rxSealed := make([][]byte, 0, batch), make([]bool, 0, batch)
	recv := func() (int, error) { return h.cfg.Link.RecvBatch(bufs, sizes) }
	if sr, ok := h.cfg.Link.(sealedReceiver); ok {
		recv = func() (int, error) { return sr.RecvBatchSealed(bufs, sizes, sealed) }
	}
	var reply []byte
	for {
		n, err := recv() // a sealed link sets sealed[i] for each frame; any other leaves it false
		if err != nil {
			// The link failed (or was closed): the port is down, and says so with PORT_ERR
			// unless Close stopped the device first.
			h.dev.Load().SetPortActive(false)
			h.err = err
			return err
		}
		for i := 0; i < n; i++ {
			frame := bufs[i][:sizes[i]]
			var consumed bool
			h.mu.Lock() // the capture's order; and Rebind may be changing the addresses answered for
			h.capture(frame)
			reply, consumed = h.resp.Handle(frame, reply[:0])
			h.mu.Unlock()
			if consumed && h.dev.Load().HasEthernet() {
				// The device's netdev answers for its addresses: the host only learned who
				// asked, and hands the frame on.
				rx, rxSealed = append(rx, frame), append(rxSealed, false)
				continue
			}
			if consumed {
				h.mu.Lock()
				h.stats.NeighborFrames++
				h.mu.Unlock()
				if len(reply) > 0 && h.cfg.Answer {
					h.mu.Lock()
					h.stats.NeighborReplies++
					h.mu.Unlock()
					_ = h.send(reply)
				}
				continue
			}
			if loss := math.Float64frombits(h.rxLoss.Load()); loss > 0 && h.loss.Float64() < loss {
				h.mu.Lock()
				h.stats.LossInjected++
				h.mu.Unlock()
				continue
			}
			rx, rxSealed = append(rx, frame), append(rxSealed, sealed[i])
		}
		if len(rx) > 0 {
			h.dev.Load().ReceiveSealed(rx, rxSealed)
			clear(rx)
			rx, rxSealed = rx[:0], rxSealed[:0]
		}
	}
}

// Close stops the device, once the frames it has queued are on the link, and the link, and waits
// for Run to return.
func (h *Host) Close() error {
	h.dev.Load().Drain()
	h.dev.Load().Stop()
	err := h.cfg.Link.Close()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("host %s: receiver did not stop", h.cfg.Name)
	}
	return err
}
