package engine_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

// TestPostErrorNamesTheWRID: a refused work request is named by the ID its poster gave it, with
// its place in the batch beside it, since the poster thinks in IDs; a post of one names the ID
// alone. Each verb says which it is.
func TestPostErrorNamesTheWRID(t *testing.T) {
	p := plainPair(t)
	srq := newSRQ(t, p.pdA, 4, 1)
	two := sge(p.mrA, 0, 8)
	two = append(two, two[0])
	for _, c := range []struct {
		name string
		post func() error
		want string
		id   uint64
		idx  int
	}{
		{"post_send batch", func() error {
			return p.qa.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)},
				engine.SendWR{ID: 0x2a, Opcode: engine.WROpcode(99)})
		}, "post_send: work request id 0x2a (index 1 of 2): invalid argument: opcode 99", 0x2a, 1},
		{"post_send one", func() error {
			return p.qa.PostSend(engine.SendWR{ID: 0x2b, Opcode: engine.WROpcode(99)})
		}, "post_send: work request id 0x2b: invalid argument: opcode 99", 0x2b, 0},
		{"post_recv batch", func() error {
			return p.qa.PostRecv(engine.RecvWR{ID: 1, SGL: sge(p.mrA, 0, 8)}, engine.RecvWR{ID: 2, SGL: sge(p.mrA, 0, 8)},
				engine.RecvWR{ID: 0x30, SGL: make([]engine.SGE, 5)})
		}, "post_recv: work request id 0x30 (index 2 of 3): invalid argument: 5 SGEs, the QP takes 4", 0x30, 2},
		{"post_srq_recv batch", func() error {
			return srq.PostRecv(engine.RecvWR{ID: 3, SGL: sge(p.mrA, 0, 8)}, engine.RecvWR{ID: 0x31, SGL: two})
		}, "post_srq_recv: work request id 0x31 (index 1 of 2): invalid argument: 2 SGEs, the SRQ takes 1", 0x31, 1},
	} {
		err := c.post()
		var pe *engine.PostError
		if !errors.As(err, &pe) || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
			continue
		}
		if pe.ID != c.id || pe.Index != c.idx || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %+v, want id 0x%x index %d EINVAL", c.name, *pe, c.id, c.idx)
		}
	}
}

// TestCreateQPCaps: capabilities are checked as the kernel's rxe checks them (rxe_qp_chk_cap):
// each at most the device's limit, the receive ones only without an SRQ, and zero taken
// anywhere; a refusal names the field, its value and the limit it broke.
func TestCreateQPCaps(t *testing.T) {
	p := plainPair(t)
	srq := newSRQ(t, p.pdA, 4, 1)
	lim := p.a.Limits()
	for _, c := range []struct {
		name string
		cap  engine.QPCap
		srq  *engine.SRQ
		want string // "" for success
	}{
		{"zero", engine.QPCap{}, nil, ""},
		{"zero with an SRQ", engine.QPCap{}, srq, ""},
		{"receive caps ignored with an SRQ", engine.QPCap{MaxSendWR: 1, MaxRecvWR: -1, MaxRecvSGE: lim.MaxSGE + 1}, srq, ""},
		{"send_wr over", engine.QPCap{MaxSendWR: lim.MaxQPWR + 1}, nil,
			"create_qp: max_send_wr 16385 is more than the device's max_qp_wr, 16384: invalid argument"},
		{"send_wr negative", engine.QPCap{MaxSendWR: -1}, nil, "create_qp: max_send_wr -1 is negative: invalid argument"},
		{"recv_wr over", engine.QPCap{MaxRecvWR: lim.MaxQPWR + 1}, nil,
			"create_qp: max_recv_wr 16385 is more than the device's max_qp_wr, 16384: invalid argument"},
		{"send_sge over", engine.QPCap{MaxSendSGE: 33}, nil,
			"create_qp: max_send_sge 33 is more than the device's max_sge, 32: invalid argument"},
		{"recv_sge over", engine.QPCap{MaxRecvSGE: 33}, nil,
			"create_qp: max_recv_sge 33 is more than the device's max_sge, 32: invalid argument"},
		{"inline over", engine.QPCap{MaxInlineData: 257}, nil,
			"create_qp: max_inline_data 257 is more than the device's max_inline_data, 256: invalid argument"},
	} {
		qp, err := p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA, SRQ: c.srq, Cap: c.cap})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, syscall.EINVAL)):
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		case qp != nil:
			must(t, qp.Destroy())
		}
	}
}

// TestZeroQueuesRefusePosts: a QP created with no room in a queue refuses every post there with
// ENOMEM, as rxe's does, and says why.
func TestZeroQueuesRefusePosts(t *testing.T) {
	p := plainPair(t)
	qa, err := p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA})
	must(t, err)
	qb, err := p.pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB})
	must(t, err)
	must(t, engine.ConnectRC(qa, qb, engine.ConnectOptions{}))
	err = qa.PostSend(engine.SendWR{ID: 5, Opcode: engine.WRRDMAWrite})
	if want := "post_send: work request id 0x5: cannot allocate memory: the QP has no send queue (max_send_wr 0)"; err == nil || err.Error() != want {
		t.Errorf("post_send: %v\nwant %s", err, want)
	}
	err = qa.PostRecv(engine.RecvWR{ID: 6})
	if want := "post_recv: work request id 0x6: cannot allocate memory: the QP has no receive queue (max_recv_wr 0)"; err == nil || err.Error() != want {
		t.Errorf("post_recv: %v\nwant %s", err, want)
	}
}
