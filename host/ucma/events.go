package ucma

import (
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/wire/cm"
)

// The events (enum rdma_cm_event_type).
const (
	evAddrResolved    = 0
	evAddrError       = 1
	evRouteResolved   = 2
	evConnectRequest  = 4
	evConnectResponse = 5
	evUnreachable     = 7
	evRejected        = 8
	evEstablished     = 9
	evDisconnected    = 10
	evMulticastJoin   = 12
	evTimewaitExit    = 15
)

// Offsets in struct rdma_ucm_event_resp and its parameters.
const (
	evParam       = 20
	cpQPN         = 0
	cpQKey        = 4
	cpPrivate     = 8
	cpPrivateLen  = 264
	cpRespRes     = 266
	cpInitDepth   = 267
	cpRetry       = 269
	cpRNRRetry    = 270
	udAH          = 8
	udPrivate     = 40
	udPrivateLen  = 296
	udPrivateSize = 256
)

// The private data a message's event carries: rdma_cm reports the whole field of the message,
// whatever the peer sent (a REQ's less rdma_cm's header).
var privateLen = map[int]int{evConnectRequest: cm.REQPrivateLen - cm.HeaderLen, evConnectResponse: cm.REPPrivateLen, evRejected: cm.REJPrivateLen}

// queueEvent queues an event of id's with status and the private data given.
func (f *File) queueEvent(id *cmID, typ int, status int32, private []byte) *event {
	return f.queueEventAs(id, id, id.uid, typ, status, private)
}

// queueEventAs queues an event of id's named by uid and counting for acct.
func (f *File) queueEventAs(id, acct *cmID, uid uint64, typ int, status int32, private []byte) *event {
	ev := &event{id: id, acct: acct}
	b := ev.data[:]
	le.PutUint64(b, uid)
	le.PutUint32(b[8:], id.num)
	le.PutUint32(b[12:], uint32(typ))
	le.PutUint32(b[16:], uint32(status))
	if private != nil || privateLen[typ] > 0 {
		p := b[evParam:]
		if id.qpType == 4 {
			n := copy(p[udPrivate:udPrivate+udPrivateSize], private)
			p[udPrivateLen] = byte(n)
		} else {
			n := copy(p[cpPrivate:cpPrivate+256], private)
			p[cpPrivateLen] = byte(max(n, privateLen[typ]))
		}
	}
	f.queue(ev)
	return ev
}

// Events is the handler of dev's connection manager's events (its rdmacm.Config.Events): it
// takes each to the file of the ID it is about.
func (s *Server) Events(dev *Device) func(rdmacm.Event) {
	return func(e rdmacm.Event) { s.event(dev, e) }
}

func (s *Server) event(dev *Device, e rdmacm.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Type == rdmacm.ConnectRequest {
		s.request(dev, e)
		return
	}
	id, ok := s.byCM[e.ID]
	if !ok || id.uid == 0 {
		return // the kernel drops the events of an ID its program has not taken yet
	}
	switch e.Type {
	case rdmacm.ConnectResponse:
		ev := id.f.queueEvent(id, evConnectResponse, 0, e.Private)
		s.peerParam(ev, e.ID)
	case rdmacm.Established:
		ev := id.f.queueEvent(id, evEstablished, 0, nil)
		if id.qpType == 4 && e.UD.AH != nil {
			p := ev.data[evParam:]
			le.PutUint32(p[cpQPN:], e.UD.QPN)
			le.PutUint32(p[cpQKey:], e.UD.QKey)
			s.putAH(id.dev, p[udAH:udAH+32], id.src.Addr(), e.ID.Peer())
		}
	case rdmacm.Rejected:
		id.f.queueEvent(id, evRejected, int32(e.Reason), e.Private)
	case rdmacm.Unreachable:
		id.f.queueEvent(id, evUnreachable, -int32(syscall.ETIMEDOUT), nil)
	case rdmacm.Disconnected:
		id.f.queueEvent(id, evDisconnected, 0, nil)
	case rdmacm.TimewaitExit:
		id.f.queueEvent(id, evTimewaitExit, 0, nil)
	}
}

// request makes the ID of a request that came to a listener on dev, and its CONNECT_REQUEST.
// s.mu is held.
func (s *Server) request(dev *Device, e rdmacm.Event) {
	l, ok := s.byCM[e.Listener]
	if !ok {
		s.log().Info("rdma_cm request for no listener of a program's: rejected", "peer", e.ID.Peer())
		go func() { _ = e.ID.Reject(nil) }()
		return
	}
	h := e.ID.RequestHeader()
	id := &cmID{ps: l.ps, qpType: l.qpType, f: l.f, dev: dev, cm: e.ID, resolved: true, routed: true, ackTimeout: -1,
		src: netip.AddrPortFrom(h.Dst, l.src.Port()), dst: netip.AddrPortFrom(h.Src, h.SrcPort)}
	if s.alloc(id) != nil {
		_ = e.ID.Reject(nil)
		return
	}
	s.byCM[e.ID] = id
	// The event names the listener's uid and the new ID, and counts for the listener.
	ev := l.f.queueEventAs(id, l, l.uid, evConnectRequest, 0, e.Private)
	s.peerParam(ev, e.ID)
}

// peerParam fills an event's connection parameters with what the peer asked for.
func (s *Server) peerParam(ev *event, c *rdmacm.ID) {
	qpn, p := c.PeerParam()
	b := ev.data[evParam:]
	if ev.id.qpType == 4 {
		le.PutUint32(b[cpQPN:], qpn)
		return
	}
	le.PutUint32(b[cpQPN:], qpn)
	b[cpRespRes], b[cpInitDepth], b[cpRetry], b[cpRNRRetry] = p.ResponderResources, p.InitiatorDepth, p.RetryCount, p.RNRRetryCount
}

// putAH writes struct ib_uverbs_ah_attr for a path from src, an address of dev's, to dst.
func (s *Server) putAH(dev *Device, b []byte, src, dst netip.Addr) {
	g := gid(dst)
	copy(b[0:16], g[:])
	b[20] = dev.gidIndex(src)
	b[21] = 64 // hop limit
	b[29], b[30] = 1, 1
}

// gidIndex is the index of a source address's RoCE v2 GID: the last entry holding it.
func (d *Device) gidIndex(a netip.Addr) byte {
	idx := 0
	for i, g := range d.Verbs.GIDs {
		if g == a {
			idx = i
		}
	}
	return byte(idx)
}

// GET_EVENT: response (8). The program's library waits for the file to be readable and asks
// again; softirdma never blocks in a command.
func getEvent(r *request) error {
	ev := r.f.take(nil)
	if ev == nil {
		return errf(syscall.EAGAIN, "no event")
	}
	r.f.s.mu.Lock()
	ev.acct.reported++
	if ev.mc != nil {
		ev.mc.reported++
	}
	r.f.s.mu.Unlock()
	r.respond(8, ev.data[:])
	r.f.s.log().Debug("rdma_cm event", "owner", r.f.owner, "id", ev.id.num, "counts for", ev.acct.num, "event", le.Uint32(ev.data[12:]))
	return nil
}

// INIT_QP_ATTR: response (8), id (16), qp_state (20): struct ib_uverbs_qp_attr, where rdma_cm
// says the program's QP goes next.
func initQPAttr(r *request) error {
	id, err := r.id(16)
	if err != nil {
		return err
	}
	state := engine.QPState(r.u32(20))
	if state > engine.QPSErr {
		return errf(syscall.EINVAL, "QP state %d", state)
	}
	if id.dev == nil {
		return errf(syscall.EINVAL, "QP attributes of an ID with no device")
	}
	var a engine.QPAttr
	var mask engine.AttrMask
	r.f.s.mu.Lock()
	tos, ackTimeout := id.tos, id.ackTimeout
	r.f.s.mu.Unlock()
	switch {
	case id.cm != nil && id.qpType != 4:
		if a, mask, err = id.cm.QPAttr(state); err != nil {
			return err
		}
	case state == engine.QPSInit && id.qpType == 4:
		a, mask = engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: rdmacm.UDPQKey}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrQKey
	case state == engine.QPSInit:
		a, mask = engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags
	default:
		return errf(syscall.EINVAL, "QP state %s before a connection", state)
	}
	if ackTimeout >= 0 && mask&engine.AttrTimeout != 0 {
		a.Timeout = uint8(ackTimeout)
	}
	b := make([]byte, 144)
	le.PutUint32(b[0:], uint32(mask))
	le.PutUint32(b[4:], uint32(a.State))
	le.PutUint32(b[12:], uint32(a.PathMTU))
	le.PutUint32(b[20:], a.QKey)
	le.PutUint32(b[24:], a.RQPSN)
	le.PutUint32(b[28:], a.SQPSN)
	le.PutUint32(b[32:], a.DestQPN)
	le.PutUint32(b[36:], uint32(a.AccessFlags))
	if mask&engine.AttrAV != 0 {
		r.f.s.putAH(id.dev, b[40:72], id.src.Addr(), a.AH.DGID)
		b[40+21], b[40+22] = a.AH.HopLimit, tos
	}
	b[130], b[131], b[132], b[133] = a.MaxRdAtomic, a.MaxDestRdAtomic, a.MinRNRTimer, 1
	b[134], b[135], b[136] = a.Timeout, a.RetryCnt, a.RNRRetry
	r.respond(8, b)
	return nil
}
