package keys

import (
	"bytes"
	"errors"
	"testing"
)

// copierSpace is a process's memory seen from outside: a window of bytes at base, and a switch
// that makes every copy fail, as process_vm_readv does once the process unmapped the range.
type copierSpace struct {
	base   uint64
	mem    []byte
	broken bool
}

func (c *copierSpace) at(addr uint64, n int) ([]byte, error) {
	if c.broken || addr < c.base || addr-c.base+uint64(n) > uint64(len(c.mem)) {
		return nil, errors.New("EFAULT")
	}
	return c.mem[addr-c.base : addr-c.base+uint64(n)], nil
}

func (c *copierSpace) ReadAt(p []byte, addr uint64) error {
	b, err := c.at(addr, len(p))
	if err == nil {
		copy(p, b)
	}
	return err
}

func (c *copierSpace) WriteAt(p []byte, addr uint64) error {
	b, err := c.at(addr, len(p))
	if err == nil {
		copy(b, p)
	}
	return err
}

func TestCopiedMemoryThroughTheKeySpace(t *testing.T) {
	cs := &copierSpace{base: 0x7f0000001000, mem: make([]byte, 8192)}
	s := New(Config{})
	k, err := s.RegMR(MRSpec{PD: 1, Mem: Copied(cs, cs.base+16, 4096), IOVA: 0x5000, Access: LocalWrite | RemoteWrite | RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := s.Remote(RemoteAccess{Key: k, PD: 1, VA: 0x5000 + 100, Len: 5, Rights: RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if n := sp.CopyFrom([]byte("hello, world")); n != 5 {
		t.Fatalf("CopyFrom copied %d bytes, want 5 (the span's length)", n)
	}
	if got := cs.mem[16+100 : 16+105]; !bytes.Equal(got, []byte("hello")) {
		t.Fatalf("the process's memory holds %q at the MR's byte 100, want %q", got, "hello")
	}
	if segs := sp.Segments(nil); len(segs) != 0 {
		t.Fatalf("a copier's span gave %d slices, want none", len(segs))
	}
	out := make([]byte, 5)
	if n := sp.CopyTo(out); n != 5 || string(out) != "hello" {
		t.Fatalf("CopyTo = %d %q", n, out)
	}
	if _, err := s.Remote(RemoteAccess{Key: k, PD: 1, VA: 0x5000 + 4090, Len: 8, Rights: RemoteWrite}); err == nil {
		t.Fatal("an access past the registered 4096 bytes was allowed")
	}
	// A zero-length access has a span with no memory: copying through it moves nothing.
	empty, err := s.Remote(RemoteAccess{Key: k, PD: 1, VA: 0x5000, Len: 0, Rights: RemoteRead})
	if err != nil || empty.CopyTo(out) != 0 || empty.CopyFrom(out) != 0 {
		t.Fatalf("a zero-length span: %v", err)
	}
	cs.broken = true
	if n := sp.CopyTo(out); n != 0 {
		t.Fatalf("a failing copier copied %d bytes, want 0", n)
	}
}
