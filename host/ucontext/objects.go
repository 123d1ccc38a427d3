package ucontext

import (
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
)

type pd struct {
	pd   *engine.PD
	uses int // MRs, MWs, AHs, QPs and SRQs on it: DEALLOC_PD waits for none (EBUSY)
}

type mr struct {
	mr    *engine.MR
	pd    *pd
	pin   Pinner // the account its pages count against, or nil
	pages uint64
}

// Pinner is a program's memory where softirdma holds the program to its RLIMIT_MEMLOCK as the
// kernel's ib_umem_get does (softirdma run -memlock): Pin counts an MR's pages against the
// process's limit and refuses past it with ENOMEM; Unpin gives them back when the MR goes.
type Pinner interface {
	Pin(pages uint64) error
	Unpin(pages uint64)
}

// unpin gives an MR's pages back to its account.
func (m *mr) unpin() {
	if m.pin != nil {
		m.pin.Unpin(m.pages)
		m.pin = nil
	}
}

type mw struct {
	mw *engine.MW
	pd *pd
}

type ah struct {
	attr engine.AHAttr
	ah   *engine.AH
	pd   *pd
}

// The single-handle commands (DEALLOC_PD, DEREG_MR, DEALLOC_MW, DESTROY_AH) carry the handle
// first.
func (r *request) handleArg() uint32 { return r.u32(0) }

func find[T any](m map[uint32]*T, h uint32, what string) (*T, error) {
	if o, ok := m[h]; ok {
		return o, nil
	}
	return nil, errf(syscall.EINVAL, "no %s with handle %d", what, h)
}

func (c *Context) allocPD(r *request) error {
	p, err := c.dev.Engine.AllocPD()
	if err != nil {
		return err
	}
	h := c.handle()
	c.pds[h] = &pd{pd: p}
	putU32(r.resp, h)
	return nil
}

func (c *Context) deallocPD(r *request) error {
	p, err := find(c.pds, r.handleArg(), "PD")
	if err != nil {
		return err
	}
	if p.uses > 0 {
		return errf(syscall.EBUSY, "PD %d has %d objects", r.handleArg(), p.uses)
	}
	delete(c.pds, r.handleArg())
	return nil
}

// Access bits a user MR may ask for (rxe's RXE_ACCESS_SUPPORTED_MR): local write, the remote
// rights, MW bind, zero-based, flush, the optional range the write ABI strips.
const mrAccessSupported = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x300 | 0xfff00000

// REG_MR: start (8), length (16), hca_va (24), pd_handle (32), access_flags (36), after the
// response pointer.
func (c *Context) regMR(r *request) error {
	start, length, iova := r.u64(8), r.u64(16), r.u64(24)
	p, err := find(c.pds, r.u32(32), "PD")
	if err != nil {
		return err
	}
	access := r.u32(36)
	if access&^mrAccessSupported != 0 {
		return errf(syscall.EOPNOTSUPP, "MR access 0x%x", access)
	}
	if start%pageSize != iova%pageSize {
		return errf(syscall.EINVAL, "start 0x%x and iova 0x%x differ within a page", start, iova)
	}
	if length == 0 || length > 1<<47 || start+length < start {
		return errf(syscall.EINVAL, "MR of %d bytes at 0x%x", length, start)
	}
	entry := &mr{pd: p}
	if pin, ok := r.mem.(Pinner); ok {
		// The pages the range touches, as ib_umem_get counts them.
		entry.pages = ((start+length+pageSize-1)&^(pageSize-1) - start&^(pageSize-1)) / pageSize
		if err := pin.Pin(entry.pages); err != nil {
			return err
		}
		entry.pin = pin
	}
	m, err := p.pd.RegCopiedMR(r.mem, start, length, iova, engine.Access(access&0xffff))
	if err != nil {
		entry.unpin()
		return err
	}
	entry.mr = m
	h := c.handle()
	c.lookups.Lock()
	c.mrs[h] = entry
	c.lookups.Unlock()
	p.uses++
	putU32(r.resp, h)
	putU32(r.resp[4:], m.LKey())
	putU32(r.resp[8:], m.RKey())
	return nil
}

func (c *Context) deregMR(r *request) error {
	m, err := find(c.mrs, r.handleArg(), "MR")
	if err != nil {
		return err
	}
	if err := m.mr.Dereg(); err != nil {
		return err
	}
	m.unpin()
	m.pd.uses--
	c.lookups.Lock()
	delete(c.mrs, r.handleArg())
	c.lookups.Unlock()
	return nil
}

// ALLOC_MW: pd_handle (8), mw_type (12).
func (c *Context) allocMW(r *request) error {
	p, err := find(c.pds, r.u32(8), "PD")
	if err != nil {
		return err
	}
	typ := r.Core[12]
	if typ != 1 && typ != 2 {
		return errf(syscall.EINVAL, "MW type %d", typ)
	}
	w, err := p.pd.AllocMW(engine.MWType(typ))
	if err != nil {
		return err
	}
	h := c.handle()
	c.lookups.Lock()
	c.mws[h] = &mw{mw: w, pd: p}
	c.lookups.Unlock()
	p.uses++
	putU32(r.resp, h)
	putU32(r.resp[4:], w.RKey())
	return nil
}

func (c *Context) deallocMW(r *request) error {
	w, err := find(c.mws, r.handleArg(), "MW")
	if err != nil {
		return err
	}
	if err := w.mw.Dealloc(); err != nil {
		return err
	}
	w.pd.uses--
	c.lookups.Lock()
	delete(c.mws, r.handleArg())
	c.lookups.Unlock()
	return nil
}

// mwByRKey finds a window by its rkey's index, as a BIND_MW WQE names it.
func (c *Context) mwByRKey(rkey uint32) *mw {
	for _, w := range c.mws {
		if w.mw.RKey()>>8 == rkey>>8 {
			return w
		}
	}
	return nil
}

// mrByLKey finds an MR by its lkey.
func (c *Context) mrByLKey(lkey uint32) *mr {
	for _, m := range c.mrs {
		if m.mr.LKey() == lkey {
			return m
		}
	}
	return nil
}

// ahAttr reads struct ib_uverbs_ah_attr (32 bytes) at b.
func ahAttr(b []byte) (engine.AHAttr, uint8, error) {
	attr := engine.AHAttr{DGID: netip.AddrFrom16([16]byte(b[0:16])).Unmap(),
		FlowLabel: (uint32(b[16]) | uint32(b[17])<<8 | uint32(b[18])<<16 | uint32(b[19])<<24) & flowLabelMask,
		HopLimit:  b[21], TrafficClass: b[22]}
	sgid, port := b[20], b[30]
	if b[29] == 0 {
		return attr, sgid, errf(syscall.EINVAL, "an address without a GRH: RoCE needs one")
	}
	if port != 1 {
		return attr, sgid, errf(syscall.EINVAL, "port %d", port)
	}
	return attr, sgid, nil
}

// CREATE_AH: user_handle (8), pd_handle (16), ah_attr (24..56). The driver answers ah_num,
// which the provider puts in its UD WQEs: the handle.
func (c *Context) createAH(r *request) error {
	p, err := find(c.pds, r.u32(16), "PD")
	if err != nil {
		return err
	}
	attr, sgid, err := ahAttr(r.Core[24:56])
	if err != nil {
		return err
	}
	if int(sgid) >= len(c.dev.GIDs) || !c.dev.GIDs[sgid].IsValid() {
		return errf(syscall.EINVAL, "source GID index %d", sgid)
	}
	a, err := p.pd.CreateAH(attr)
	if err != nil {
		return err
	}
	h := c.handle()
	c.lookups.Lock()
	c.ahs[h] = &ah{attr: attr, ah: a, pd: p}
	c.lookups.Unlock()
	p.uses++
	putU32(r.resp, h)
	r.driver = make([]byte, 8)
	putU32(r.driver, h)
	return nil
}

func (c *Context) destroyAH(r *request) error {
	a, err := find(c.ahs, r.handleArg(), "AH")
	if err != nil {
		return err
	}
	a.pd.uses--
	c.lookups.Lock()
	delete(c.ahs, r.handleArg())
	c.lookups.Unlock()
	return nil
}

func (c *Context) createCompChannel(r *request) error {
	ch, file, err := newChannel(compEventSize)
	if err != nil {
		return err
	}
	c.chans = append(c.chans, ch)
	r.files = append(r.files, fileAt{0, file})
	return nil
}
