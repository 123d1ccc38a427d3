package keys

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

// benchAccess times check, reporting allocations; an error from it fails the benchmark.
func benchAccess(b *testing.B, check func() error) {
	b.ReportAllocs()
	for b.Loop() {
		if err := check(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRemoteLookupHit(b *testing.B) {
	s := newSpace(b)
	k, _ := reg(b, s, pdA, 1<<20, 0x100000, LocalWrite|RemoteWrite|RemoteRead)
	a := RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x100000 + 4096, Len: 4096, Rights: RemoteWrite}
	benchAccess(b, func() error { _, err := s.Remote(a); return err })
}

func BenchmarkRemoteLookupHitWindow(b *testing.B) {
	s := newSpace(b)
	mr, _ := reg(b, s, pdA, 1<<20, 0x100000, LocalWrite|MWBind)
	w := bind(b, s, Bind{MW: allocMW(b, s, pdA, MWType2), Key8: 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x100000, Len: 1 << 16, Access: RemoteWrite})
	a := RemoteAccess{Key: w, PD: pdA, QP: qp1, VA: 0x100000 + 4096, Len: 4096, Rights: RemoteWrite}
	benchAccess(b, func() error { _, err := s.Remote(a); return err })
}

func BenchmarkLookupMiss(b *testing.B) {
	s := newSpace(b)
	k, _ := reg(b, s, pdA, 4096, 0x1000, LocalWrite|RemoteWrite)
	a := RemoteAccess{Key: k.Inc(), PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}
	benchAccess(b, func() error {
		if _, err := s.Remote(a); err == nil {
			return errors.New("stale key accepted")
		}
		return nil
	})
}

func BenchmarkLocalLookupHit(b *testing.B) {
	s := newSpace(b)
	k, _ := reg(b, s, pdA, 1<<16, 0x1000, LocalWrite)
	a := LocalAccess{Key: k, PD: pdA, VA: 0x1000, Len: 4096, Rights: LocalWrite}
	benchAccess(b, func() error { _, err := s.Local(a); return err })
}

func BenchmarkType2BindInvalidate(b *testing.B) {
	s := newSpace(b)
	mr, _ := reg(b, s, pdA, 1<<16, 0x1000, LocalWrite|MWBind)
	w := allocMW(b, s, pdA, MWType2)
	bd := Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite | RemoteRead}
	b.ReportAllocs()
	for b.Loop() {
		bd.Key8 = bd.MW.Key8() + 1
		res, err := s.BindMW(bd)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Invalidate(Invalidate{Key: res.Key, QP: qp1}); err != nil {
			b.Fatal(err)
		}
		bd.MW = res.Key
	}
}

func BenchmarkRegDereg(b *testing.B) {
	s := newSpace(b)
	spec := MRSpec{PD: pdA, Mem: Contiguous(make([]byte, 4096)), IOVA: 0x1000, Access: LocalWrite | RemoteWrite}
	b.ReportAllocs()
	for b.Loop() {
		k, err := s.RegMR(spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.DeregMR(k, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegister1MMRs registers one million live MRs over one shared buffer (the memory
// itself is the consumer's; what is measured is the key space's own cost) and reports the
// time for the million and the heap bytes each live MR costs.
func BenchmarkRegister1MMRs(b *testing.B) {
	const n = 1 << 20
	buf := make([]byte, 4096)
	spec := MRSpec{PD: pdA, Mem: Contiguous(buf), IOVA: 0x1000, Access: LocalWrite | RemoteWrite | RemoteRead}
	var perMR float64
	var elapsed time.Duration
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		s := New(Config{Rand: Seeded(1)})
		for range n {
			if _, err := s.RegMR(spec); err != nil {
				b.Fatal(err)
			}
		}
		elapsed += time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perMR = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perMR, "B/liveMR")
	b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/1M-MRs")
}
