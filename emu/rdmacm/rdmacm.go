// Package rdmacm is a host device's connection manager: IB CM over the device's GSI QP (QP1), as
// Linux's ib_cm speaks it on RoCEv2, with rdma_cm's addressing on top (IP addresses and ports,
// the TCP port space's service IDs, rdma_cm's header first in a REQ's private data), and a Go API
// in the spirit of librdmacm: listen, connect with private data and connection parameters, accept,
// reject, disconnect, and an event stream. It moves the QPs it connects through INIT, RTR and RTS
// itself, as the kernel's rdma_cm does. Every timeout runs on the device's clock, so in the
// simulator a connection is set up deterministically in virtual time.
//
// It connects RC QPs in the TCP port space, resolves UD services in the UDP port space (SIDR), and
// tells a peer to wait (MRA) while its consumer has not answered a request. What it does not do:
// LAP/APR (path migration), and UC.
//
// What a peer's messages can make it hold is bounded: requests its consumer has not answered and
// SIDR answers kept for duplicates by Config.Backlog, QP1's address handles kept to 4096 peers.
// Every ID ends on the device's clock whatever the peer does or fails to do: a request nobody
// answers when its sender would have stopped waiting, every message sent when its retries are
// spent, a time wait when it is over.
package rdmacm

import (
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/mad"
)

// Config sets up a Manager.
type Config struct {
	// Events receives every event. It runs on the device's clock or completion path and must
	// not block; it may call the Manager and the IDs.
	Events func(Event)
	// Rand chooses communication IDs and starting PSNs; nil is unpredictable.
	Rand mrand.Source
	// ResponseTimeout is the CM response timeout code a REQ asks its peer to answer within
	// (4.096 us x 2^n) and that this side waits for an answer [20: 4.3 s, Linux's], and
	// MaxRetries how often a REQ, REP or DREQ is sent again before giving up [15, Linux's].
	ResponseTimeout, MaxRetries uint8
	// ServiceTimeout is the code an MRA sends (4.096 us x 2^n): how much longer the peer is asked
	// to wait for an answer its consumer has not given yet [24: 69 s, rdma_cm's CMA_CM_MRA_SETTING].
	ServiceTimeout uint8
	// Backlog is how many requests (REQs and SIDR_REQs) the consumer has not answered yet are
	// kept, and how many SIDR answers are kept to send again [1024]. Past it a REQ is refused
	// with REJ NO_RESOURCES and a SIDR_REQ dropped, and an answer is not kept (Stats.Overflow):
	// a peer that sends requests with ever new communication IDs holds no more than that.
	Backlog int
}

// DefaultBacklog is Config.Backlog's default.
const DefaultBacklog = 1024

// Manager is a device's connection manager: its GSI QP and every connection through it.
type Manager struct {
	dev   *engine.Device
	clock engine.Clock
	cfg   Config

	mu        sync.Mutex
	pd        *engine.PD
	cq        *engine.CQ
	qp1       *engine.QP
	mr        *engine.MR
	buf       []byte
	sendNext  int
	inflight  int // send slots whose MAD has not completed
	rnd       *mrand.Rand
	listeners map[uint64]*ID // by service ID
	conns     map[uint32]*ID // by local communication ID
	ahs       map[netip.Addr]*engine.AH
	hiTID     uint64
	// waiting counts the IDs whose request the consumer has not answered, answers those of
	// SIDR_REPs kept to send again: what a peer's requests hold, bounded by the backlog.
	waiting, answers int
	events           []Event  // to deliver once the lock is released
	after            []func() // what calls into the device, run once the lock is released
	polling          atomic.Bool
	stats            Stats
}

// Stats counts the MADs the manager sent and received.
type Stats struct {
	Sent, Received, Resent, Dropped uint64
	MRAs                            uint64 // MRAs sent
	// Overflow counts requests refused, and SIDR answers not kept, over Config.Backlog;
	// Expired the requests given up because the consumer did not answer while the peer waited.
	Overflow, Expired uint64
}

// New gives dev a connection manager: its GSI QP, created and moved to RTS, with receives posted.
func New(dev *engine.Device, cfg Config) (*Manager, error) {
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	if cfg.ServiceTimeout == 0 {
		cfg.ServiceTimeout = 24
	}
	if cfg.Backlog == 0 {
		cfg.Backlog = DefaultBacklog
	}
	if cfg.ResponseTimeout > 31 || cfg.MaxRetries > 15 || cfg.ServiceTimeout > 31 || cfg.Backlog < 0 {
		return nil, fmt.Errorf("rdmacm: response timeout %d, max retries %d, service timeout %d, backlog %d: %w",
			cfg.ResponseTimeout, cfg.MaxRetries, cfg.ServiceTimeout, cfg.Backlog, syscall.EINVAL)
	}
	src := cfg.Rand
	if src == nil {
		src = mrand.NewPCG(uint64(time.Now().UnixNano()), 0xc0ffee)
	}
	m := &Manager{dev: dev, clock: dev.Clock(), cfg: cfg, rnd: mrand.New(src), listeners: map[uint64]*ID{},
		conns: map[uint32]*ID{}, ahs: map[netip.Addr]*engine.AH{}}
	m.hiTID = uint64(m.rnd.Uint32()&0xff) | 1
	var err error
	if m.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if m.cq, err = dev.CreateCQ(recvSlots + sendSlots + 1); err != nil {
		return nil, err
	}
	m.qp1, err = m.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeGSI, SendCQ: m.cq, RecvCQ: m.cq,
		Cap: engine.QPCap{MaxSendWR: sendSlots, MaxRecvWR: recvSlots, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		a    engine.QPAttr
		mask engine.AttrMask
	}{
		{engine.QPAttr{State: engine.QPSInit, QKey: engine.GSIQKey}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrQKey},
		{engine.QPAttr{State: engine.QPSRTR}, engine.AttrState},
		{engine.QPAttr{State: engine.QPSRTS}, engine.AttrState | engine.AttrSQPSN},
	} {
		if err := m.qp1.Modify(s.a, s.mask); err != nil {
			return nil, err
		}
	}
	m.buf = make([]byte, recvSlots*recvSlot+sendSlots*mad.Len)
	if m.mr, err = m.pd.RegMR(m.buf, engine.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range recvSlots {
		if err := m.postRecv(i); err != nil {
			return nil, err
		}
	}
	// The completion callback runs in whatever goroutine released the device's lock, maybe one
	// holding the manager's: the MADs are taken in a step of the clock of their own.
	m.cq.OnCompletion(func() {
		if m.polling.CompareAndSwap(false, true) {
			m.clock.Post(0, m.poll)
		}
	})
	return m, nil
}

// Stats reports the MADs sent and received.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// deliver runs what waited for the lock to be released, then hands the events gathered under it
// to the consumer.
func (m *Manager) deliver() {
	for {
		m.mu.Lock()
		after, ev := m.after, m.events
		m.after, m.events = nil, nil
		m.mu.Unlock()
		if len(ev) == 0 && len(after) == 0 {
			return
		}
		for _, f := range after {
			f()
		}
		for _, e := range ev {
			if m.cfg.Events != nil {
				m.cfg.Events(e)
			}
		}
	}
}
