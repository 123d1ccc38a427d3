package engine_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

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
