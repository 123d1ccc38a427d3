package engine_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/keys"
)

// TestNilArguments: every verb given a nil object where it takes a pointer, as its receiver or
// an argument, returns EINVAL naming what was nil instead of panicking, as it does for any
// other bad argument; so does one given a zero object the engine did not make (&engine.QP{}).
// The table holds every exported function and method of the engine that takes a pointer and
// returns an error.
func TestNilArguments(t *testing.T) {
	p := plainPair(t)
	pageList := engine.PageList{PageSize: 4096, Length: 1, Pages: []uint64{0}}
	var (
		dev *engine.Device
		pd  *engine.PD
		qp  *engine.QP
		cq  *engine.CQ
		mr  *engine.MR
		mw  *engine.MW
		srq *engine.SRQ
		ah  *engine.AH
		gm  *engine.GuestMemory
	)
	ud, err := p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: p.cqA, RecvCQ: p.cqA, Cap: engine.QPCap{MaxSendWR: 1}})
	must(t, err)
	must(t, ud.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrQKey))
	must(t, ud.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
	must(t, ud.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState|engine.AttrSQPSN))
	for _, c := range []struct {
		name string
		call func() error
		want string // in the error
	}{
		{"ConnectRC(qp, nil)", func() error { return engine.ConnectRC(p.qa, nil, engine.ConnectOptions{}) }, "connect_rc: QP b is nil"},
		{"ConnectRC(nil, qp)", func() error { return engine.ConnectRC(nil, p.qa, engine.ConnectOptions{}) }, "connect_rc: QP a is nil"},
		{"ConnectRC(zero, qp)", func() error { return engine.ConnectRC(&engine.QP{}, p.qa, engine.ConnectOptions{}) }, "connect_rc: QP a was not made by CreateQP"},
		{"ConnectUC(qp, nil)", func() error { return engine.ConnectUC(p.qa, nil, engine.MTU1024) }, "connect_uc: QP b is nil"},
		{"ConnectUC(nil, nil)", func() error { return engine.ConnectUC(nil, nil, engine.MTU1024) }, "connect_uc: QP a is nil"},

		{"nil AH.Destroy", func() error { return ah.Destroy() }, "destroy_ah: AH is nil"},
		{"zero AH.Destroy", func() error { return (&engine.AH{}).Destroy() }, "destroy_ah: AH was not made by CreateAH"},
		{"nil CQ.Destroy", func() error { return cq.Destroy() }, "destroy_cq: CQ is nil"},
		{"zero CQ.Destroy", func() error { return (&engine.CQ{}).Destroy() }, "destroy_cq: CQ was not made by CreateCQ"},
		{"nil CQ.ReqNotify", func() error { return cq.ReqNotify(false) }, "req_notify_cq: CQ is nil"},

		{"nil Device.AllocPD", func() error { _, err := dev.AllocPD(); return err }, "alloc_pd: device is nil"},
		{"zero Device.AllocPD", func() error { _, err := (&engine.Device{}).AllocPD(); return err }, "alloc_pd: device was not made by NewDevice"},
		{"nil Device.CreateCQ", func() error { _, err := dev.CreateCQ(1); return err }, "create_cq: device is nil"},
		{"nil Device.CreateCQSink", func() error { _, err := dev.CreateCQSink(func(engine.WC) bool { return true }); return err }, "create_cq: device is nil"},
		{"nil Device.QueryMW", func() error { _, err := dev.QueryMW(nil); return err }, "query_mw: device is nil"},
		{"Device.QueryMW(nil)", func() error { _, err := p.a.QueryMW(nil); return err }, "query_mw: MW is nil"},

		{"nil GuestMemory.Map", func() error { return gm.Map(0, make([]byte, 1)) }, "map: guest memory is nil"},
		{"nil GuestMemory.Unmap", func() error { return gm.Unmap(0, 1) }, "unmap: guest memory is nil"},

		{"nil MR.Dereg", func() error { return mr.Dereg() }, "dereg_mr: MR is nil"},
		{"zero MR.Dereg", func() error { return (&engine.MR{}).Dereg() }, "dereg_mr: MR was not made by"},
		{"nil MR.Rereg", func() error { return mr.Rereg(keys.ChangeAccess, nil, nil, 0) }, "rereg_mr: MR is nil"},
		{"MR.Rereg(ChangePD, nil)", func() error { return p.mrA.Rereg(keys.ChangePD, nil, nil, 0) }, "rereg_mr: PD is nil"},
		{"nil MR.ReregGuest", func() error { return mr.ReregGuest(keys.ChangeAccess, nil, nil, pageList, 0, 0) }, "rereg_mr: MR is nil"},
		{"MR.ReregGuest(ChangePD, nil)", func() error { return p.mrA.ReregGuest(keys.ChangePD, nil, nil, pageList, 0, 0) }, "rereg_mr: PD is nil"},
		{"MR.ReregGuest(nil space)", func() error { return p.mrA.ReregGuest(keys.ChangeTranslation, nil, nil, pageList, 0, 0) }, "address space <nil> is nil"},
		{"MR.ReregGuest(nil *GuestMemory)", func() error { return p.mrA.ReregGuest(keys.ChangeTranslation, nil, gm, pageList, 0, 0) }, "address space *engine.GuestMemory is nil"},

		{"nil MW.Dealloc", func() error { return mw.Dealloc() }, "dealloc_mw: MW is nil"},
		{"zero MW.Dealloc", func() error { return (&engine.MW{}).Dealloc() }, "dealloc_mw: MW was not made by AllocMW"},

		{"nil PD.AllocFastRegMR", func() error { _, err := pd.AllocFastRegMR(4096); return err }, "alloc_mr: PD is nil"},
		{"nil PD.AllocMW", func() error { _, err := pd.AllocMW(engine.MWType2); return err }, "alloc_mw: PD is nil"},
		{"nil PD.CreateAH", func() error { _, err := pd.CreateAH(engine.AHAttr{DGID: p.b.IP()}); return err }, "create_ah: PD is nil"},
		{"nil PD.CreateQP", func() error {
			_, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA})
			return err
		}, "create_qp: PD is nil"},
		{"zero PD.CreateQP", func() error {
			_, err := (&engine.PD{}).CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA})
			return err
		}, "create_qp: PD was not made by AllocPD"},
		{"PD.CreateQP(nil CQ)", func() error {
			_, err := p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA})
			return err
		}, "create_qp: a send and a receive CQ are needed"},
		{"nil PD.CreateSRQ", func() error { _, err := pd.CreateSRQ(1, 1); return err }, "create_srq: PD is nil"},
		{"nil PD.RegGuestMR", func() error { _, err := pd.RegGuestMR(new(engine.GuestMemory), pageList, 0, 0); return err }, "reg_mr: PD is nil"},
		{"PD.RegGuestMR(nil space)", func() error { _, err := p.pdA.RegGuestMR(nil, pageList, 0, 0); return err }, "address space <nil> is nil"},
		{"PD.RegGuestMR(nil *GuestMemory)", func() error { _, err := p.pdA.RegGuestMR(gm, pageList, 0, 0); return err }, "address space *engine.GuestMemory is nil"},
		{"nil PD.RegImplicitMR", func() error { _, err := pd.RegImplicitMR(new(engine.GuestMemory), 0); return err }, "reg_mr: PD is nil"},
		{"PD.RegImplicitMR(nil *GuestMemory)", func() error { _, err := p.pdA.RegImplicitMR(gm, 0); return err }, "address space *engine.GuestMemory is nil"},
		{"nil PD.RegMR", func() error { _, err := pd.RegMR(make([]byte, 8), 0); return err }, "reg_mr: PD is nil"},
		{"nil PD.RegMRIova", func() error { _, err := pd.RegMRIova(make([]byte, 8), 0, 0); return err }, "reg_mr: PD is nil"},

		{"nil QP.AttachMcast", func() error { return qp.AttachMcast(netip.MustParseAddr("ff0e::1")) }, "attach_mcast: QP is nil"},
		{"nil QP.BindMW", func() error { return qp.BindMW(nil, engine.MWBind{}) }, "bind_mw: QP is nil"},
		{"QP.BindMW(nil)", func() error { return p.qa.BindMW(nil, engine.MWBind{}) }, "bind_mw: MW is nil"},
		{"QP.BindMW(zero)", func() error { return p.qa.BindMW(&engine.MW{}, engine.MWBind{}) }, "bind_mw: MW was not made by AllocMW"},
		{"nil QP.Destroy", func() error { return qp.Destroy() }, "destroy_qp: QP is nil"},
		{"zero QP.Destroy", func() error { return (&engine.QP{}).Destroy() }, "destroy_qp: QP was not made by CreateQP"},
		{"nil QP.DetachMcast", func() error { return qp.DetachMcast(netip.MustParseAddr("ff0e::1")) }, "detach_mcast: QP is nil"},
		{"nil QP.Modify", func() error { return qp.Modify(engine.QPAttr{}, 0) }, "modify_qp: QP is nil"},
		{"nil QP.PostRecv", func() error { return qp.PostRecv(engine.RecvWR{}) }, "post_recv: QP is nil"},
		{"nil QP.PostSend", func() error { return qp.PostSend(engine.SendWR{}) }, "post_send: QP is nil"},
		{"zero QP.PostSend", func() error { return (&engine.QP{}).PostSend(engine.SendWR{}) }, "post_send: QP was not made by CreateQP"},
		{"nil QP.PostSendError", func() error { return qp.PostSendError(engine.PostedError{}) }, "post_send: QP is nil"},
		{"PostSend(UD, nil AH)", func() error { return ud.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend}) }, "a UD work request needs an address handle"},
		{"PostSend(UD, zero AH)", func() error { return ud.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, AH: &engine.AH{}}) }, "the address handle was not made by CreateAH"},
		{"PostSend(BIND_MW, nil MW)", func() error {
			return p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRBindMW})
		}, "BIND_MW work requests bind type 2 windows"},
		{"PostSend(BIND_MW, zero MW)", func() error {
			return p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRBindMW, Bind: engine.BindInfo{MW: &engine.MW{}}})
		}, "the window was not made by AllocMW"},
		{"PostSend(REG_MR, nil MR)", func() error { return p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRegMR}) }, "REG_MR without an MR"},

		{"nil SRQ.Destroy", func() error { return srq.Destroy() }, "destroy_srq: SRQ is nil"},
		{"zero SRQ.Destroy", func() error { return (&engine.SRQ{}).Destroy() }, "destroy_srq: SRQ was not made by CreateSRQ"},
		{"nil SRQ.Modify", func() error { return srq.Modify(engine.SRQAttr{}, 0) }, "modify_srq: SRQ is nil"},
		{"nil SRQ.PostRecv", func() error { return srq.PostRecv(engine.RecvWR{}) }, "post_srq_recv: SRQ is nil"},
	} {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return c.call()
		}()
		if err == nil || !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant EINVAL with %q", c.name, err, c.want)
		}
	}
}

// TestNilGuestMemoryMapsNothing: a nil *GuestMemory is an empty address space, as a nil map
// is an empty map: it maps nothing and reads nothing, without panicking.
func TestNilGuestMemoryMapsNothing(t *testing.T) {
	var gm *engine.GuestMemory
	if gm.Mapped(0, 1) || gm.Read(0, make([]byte, 1)) || gm.Write(0, make([]byte, 1)) || len(gm.Segments(0, 1, nil)) != 0 {
		t.Fatal("a nil GuestMemory maps something")
	}
	if _, ok := gm.RegionAt(0); ok {
		t.Fatal("a nil GuestMemory has a region")
	}
}
