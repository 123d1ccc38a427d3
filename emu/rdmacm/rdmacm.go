// Package rdmacm is a host device's connection manager: IB CM over the device's GSI QP (QP1), as
// Linux's ib_cm speaks it on RoCEv2, with rdma_cm's addressing on top (IP addresses and ports,
// the TCP port space's service IDs, rdma_cm's header first in a REQ's private data), and a Go API
// in the spirit of librdmacm: listen, connect with private data and connection parameters, accept,
// reject, disconnect, destroy an ID, close the manager, and an event stream. It moves the QPs it connects through INIT, RTR and RTS
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
//
// Its files follow Linux's split of the same work: agent.go is the MAD agent on QP1 (mad.c);
// ibcm.go, establish.go, teardown.go and timers.go the IB CM's state machine (cm.c), sidr.go its
// service ID resolution; cma.go the rdma_cm API (cma.c), and qp.go the moves it makes of its
// consumers' QPs.
package rdmacm

import (
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
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
	// Logger hears what went wrong with no caller to tell: a receive buffer QP1 could not take
	// back, a QP that would not go to ERR. Nil is slog.Default().
	Logger *slog.Logger
}

// DefaultBacklog is Config.Backlog's default.
const DefaultBacklog = 1024

// Manager is a device's connection manager: its GSI QP and every connection through it.
type Manager struct {
	dev   *engine.Device
	clock engine.Clock
	cfg   Config
	log   *slog.Logger
	agent *agent

	mu        sync.Mutex
	rnd       *mrand.Rand
	listeners map[uint64]*ID // by service ID
	conns     map[uint32]*ID // by local communication ID
	hiTID     uint64
	// waiting counts the IDs whose request the consumer has not answered, answers those of
	// SIDR_REPs kept to send again: what a peer's requests hold, bounded by the backlog.
	waiting, answers int
	events           []Event  // to deliver once the lock is released
	after            []func() // what calls into the device, run once the lock is released
	stats            Stats
	closed           bool
}

// Stats counts the MADs the manager sent and received.
type Stats struct {
	Sent, Received, Resent, Dropped uint64
	MRAs                            uint64 // MRAs sent
	// Overflow counts requests refused, and SIDR answers not kept, over Config.Backlog;
	// Expired the requests given up because the consumer did not answer while the peer waited.
	Overflow, Expired uint64
	// RecvLost counts receives of QP1 that could not be posted again once their MAD was taken:
	// each is a MAD fewer QP1 holds at once. QPErrors counts connections' QPs that would not go
	// to ERR when the connection ended. Each is logged.
	RecvLost, QPErrors uint64
}

// orDefault sets a setting left zero to its default d.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// New gives dev a connection manager: its GSI QP, created and moved to RTS, with receives posted.
func New(dev *engine.Device, cfg Config) (*Manager, error) {
	orDefault(&cfg.ResponseTimeout, 20)
	orDefault(&cfg.MaxRetries, 15)
	orDefault(&cfg.ServiceTimeout, 24)
	orDefault(&cfg.Backlog, DefaultBacklog)
	if cfg.ResponseTimeout > 31 || cfg.MaxRetries > 15 || cfg.ServiceTimeout > 31 || cfg.Backlog < 0 {
		return nil, fmt.Errorf("rdmacm: response timeout %d, max retries %d, service timeout %d, backlog %d: %w",
			cfg.ResponseTimeout, cfg.MaxRetries, cfg.ServiceTimeout, cfg.Backlog, syscall.EINVAL)
	}
	src := cfg.Rand
	if src == nil {
		src = mrand.NewPCG(uint64(time.Now().UnixNano()), 0xc0ffee)
	}
	m := &Manager{dev: dev, clock: dev.Clock(), cfg: cfg, log: cfg.Logger, rnd: mrand.New(src), listeners: map[uint64]*ID{},
		conns: map[uint32]*ID{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.hiTID = uint64(m.rnd.Uint32()&0xff) | 1
	var err error
	if m.agent, err = newAgent(dev, m.log, m.receive, m.deliver); err != nil {
		return nil, err
	}
	return m, nil
}

// Stats reports the MADs sent and received.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	st := m.stats
	m.mu.Unlock()
	st.RecvLost = m.agent.lostReceives()
	return st
}

// Close ends the manager: every ID is destroyed as Destroy does (a connection disconnected, a
// request refused, a listener stopped, each saying so to its peer), its timers stopped, its
// listeners, connections and address handles released, and no event delivered after. QP1, its
// CQ and its memory go once the messages already posted have left. Every call after, Close's
// too, answers ErrClosed; Stats still reports.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	for _, id := range m.listeners {
		m.destroy(id)
	}
	for _, id := range m.conns {
		m.destroy(id)
	}
	m.closed = true
	m.mu.Unlock()
	m.deliver()
	return m.agent.close()
}

// deliver runs what waited for the lock to be released, then hands the events gathered under it
// to the consumer: those of IDs destroyed meanwhile are not.
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
			if m.cfg.Events != nil && m.live(e.ID) {
				m.cfg.Events(e)
			}
		}
	}
}

// live says whether an ID's events are still delivered: it is not destroyed.
func (m *Manager) live(id *ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !id.destroyed
}
