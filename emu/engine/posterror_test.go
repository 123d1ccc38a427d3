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
