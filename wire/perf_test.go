package wire

import (
	"hash/crc32"
	"strconv"
	"testing"
)

// TestZeroAllocs: neither direction allocates per frame, for good frames and rejected ones.
func TestZeroAllocs(t *testing.T) {
	b := NewBuilder(path6)
	var p Parser
	var f Frame
	buf := make([]byte, 8192)
	payload := samplePayload(4096, 1)
	h := sampleHeader(RCWriteFirst, 1)
	frame, err := b.Build(buf, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), frame...)
	bad[len(bad)-1] ^= 1
	short := frame[:40]
	for name, fn := range map[string]func(){
		"build":       func() { _, _ = b.Build(buf, &h, payload) },
		"parse":       func() { _ = p.Parse(&f, frame) },
		"parse bad":   func() { _ = p.Parse(&f, bad) },
		"parse short": func() { _ = p.Parse(&f, short) },
		"begin+seal": func() {
			fr, slot, _ := b.Begin(buf, &h, 64)
			copy(slot, payload)
			b.Seal(fr)
		},
	} {
		if n := testing.AllocsPerRun(200, fn); n != 0 {
			t.Errorf("%s: %v allocations per frame", name, n)
		}
	}
}

var sink uint32

// The benchmarks put the codec next to what it cannot avoid doing: one copy of the payload and
// one CRC-32 over it. BenchmarkBaseline is crc32.ChecksumIEEE plus copy of the payload size;
// BenchmarkBuild is a whole frame with ICRC; BenchmarkParse is parse plus ICRC verification;
// BenchmarkBuildParse is both, the figure the target (at most 2x the baseline at 4 KiB) is about.
var benchSizes = []int{64, 4096}

func BenchmarkBaseline(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			src, dst := samplePayload(n, 1), make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
				sink += crc32.ChecksumIEEE(dst)
			}
		})
	}
}

// benchSized runs a sub-benchmark named by each of benchSizes, timing the op setup makes for
// a payload of that many bytes.
func benchSized(b *testing.B, setup func(b *testing.B, n int) func() error) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			op := setup(b, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	benchSized(b, func(b *testing.B, n int) func() error {
		bl := NewBuilder(path4)
		h := sampleHeader(RCSendOnly, 1)
		payload, buf := samplePayload(n, 1), make([]byte, n+128)
		return func() error { _, err := bl.Build(buf, &h, payload); return err }
	})
}

func BenchmarkParse(b *testing.B) {
	benchSized(b, func(b *testing.B, n int) func() error {
		h := sampleHeader(RCSendOnly, 1)
		frame, err := NewBuilder(path4).Build(make([]byte, n+128), &h, samplePayload(n, 1))
		if err != nil {
			b.Fatal(err)
		}
		var p Parser
		var f Frame
		return func() error { return p.Parse(&f, frame) }
	})
}

func BenchmarkBuildParse(b *testing.B) {
	benchSized(b, func(b *testing.B, n int) func() error {
		bl := NewBuilder(path4)
		h := sampleHeader(RCSendOnly, 1)
		payload, buf := samplePayload(n, 1), make([]byte, n+128)
		var p Parser
		var f Frame
		return func() error {
			frame, _ := bl.Build(buf, &h, payload)
			return p.Parse(&f, frame)
		}
	})
}
