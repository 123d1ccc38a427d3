package engine

import "testing"

// The receive path's index of QPs finds what the table of record holds, nothing else, and
// lets a page of numbers go with its last QP.
func TestQPIndex(t *testing.T) {
	var x qpIndex
	a, b, c := &QP{qpn: 0x11}, &QP{qpn: 0x12}, &QP{qpn: 0xfff011}
	for _, qp := range []*QP{a, b, c} {
		x.add(qp)
	}
	for _, tc := range []struct {
		qpn  uint32
		want *QP
	}{{0x11, a}, {0x12, b}, {0xfff011, c}, {0x13, nil}, {0, nil}, {0xffffff, nil}, {0x1000000, nil}, {^uint32(0), nil}} {
		if got := x.load(tc.qpn); got != tc.want {
			t.Errorf("load(0x%x) = %p, want %p", tc.qpn, got, tc.want)
		}
	}
	x.remove(&QP{qpn: 0x11}) // another QP of the same number: not indexed, not removed
	if x.load(0x11) != a {
		t.Fatal("removing a QP that is not indexed removed the one that is")
	}
	x.remove(a)
	if x.load(0x11) != nil || x.load(0x12) != b || x.pages[0].Load() == nil {
		t.Fatal("removing one QP of a page")
	}
	x.remove(b)
	x.remove(c)
	for i := range x.pages {
		if x.pages[i].Load() != nil || x.used[i] != 0 {
			t.Fatalf("page %d still held with no QP in it", i)
		}
	}
}
