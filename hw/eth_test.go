package hw

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/hw/abi"
)

// ethDesc writes descriptor i of the ring at ring.
func (b *bench) ethDesc(ring uint64, i uint32, addr uint64, n uint32) {
	d := b.at(ring + abi.QueueHeaderSize + uint64(i)*abi.EthDescSize)
	binary.LittleEndian.PutUint64(d[abi.EthDescAddr:], addr)
	binary.LittleEndian.PutUint32(d[abi.EthDescLen:], n)
	binary.LittleEndian.PutUint32(d[abi.EthDescFlags:], 0)
}

// The Ethernet function on a simulated link: frames a peer sends to the function's MAC land in
// the buffers the driver posted (length and DONE in their descriptors, the RX vector
// signalled), one too big for its buffer or finding none is dropped and counted, and the
// frames the driver puts in the TX ring reach the peer whole, a malformed descriptor skipped.
func TestEthernetFunction(t *testing.T) {
	fnMAC := [6]byte{2, 0, 0, 0, 0, 1}
	b, peer := newBenchWithPeer(t)
	var heard [][]byte
	peer.OnOtherFrame(func(f []byte) { heard = append(heard, f) })
	b.enable()
	if b.reg(abi.RegCaps)&abi.CapEthernet == 0 {
		t.Fatal("CAPS does not offer the Ethernet function")
	}
	ethArgs := func(kind uint8, vector uint16, table uint64) []byte {
		a := make([]byte, 8+abi.QueueArgsSize)
		a[0] = kind
		binary.LittleEndian.PutUint16(a[2:], vector)
		copy(a[8:], queueArgs(3, 4, table, 1))
		return a
	}
	b.ringAt(0x130000, 0x111000, 1, 3, 4)
	b.ok(abi.OpCreateEthRing, ethArgs(abi.EthTX, 4, 0x111000))
	b.ringAt(0x140000, 0x112000, 1, 3, 4)
	b.ok(abi.OpCreateEthRing, ethArgs(abi.EthRX, 5, 0x112000))

	// Two RX buffers: 2 KiB, then 64 bytes.
	b.ethDesc(0x140000, 0, 0x1a0000, 2048)
	b.ethDesc(0x140000, 1, 0x1a1000, 64)
	binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHProducer), 2)
	frame := func(n int, etherType uint16) []byte {
		f := make([]byte, n)
		copy(f[0:6], fnMAC[:])
		copy(f[6:12], []byte{2, 0, 0, 0, 0, 2})
		binary.BigEndian.PutUint16(f[12:], etherType)
		for i := 14; i < n; i++ {
			f[i] = byte(i)
		}
		return f
	}
	arp, big, third := frame(42, 0x0806), frame(100, 0x88b5), frame(60, 0x88b5)
	for _, f := range [][]byte{arp, big, third} {
		peer.SendFrame(f)
	}
	b.sim.RunUntilIdle(0)
	d0, d1 := b.at(0x140000+abi.QueueHeaderSize), b.at(0x140000+abi.QueueHeaderSize+abi.EthDescSize)
	if binary.LittleEndian.Uint32(d0[abi.EthDescLen:]) != 42 || binary.LittleEndian.Uint32(d0[abi.EthDescFlags:]) != abi.EthDescDone ||
		!bytes.Equal(b.at(0x1a0000)[:42], arp) {
		t.Fatalf("the ARP frame's buffer: % x", d0[:16])
	}
	if binary.LittleEndian.Uint32(d1[abi.EthDescLen:]) != 0 || binary.LittleEndian.Uint32(d1[abi.EthDescFlags:]) != abi.EthDescDone {
		t.Fatalf("a frame too big for its buffer: % x", d1[:16])
	}
	if cons := binary.LittleEndian.Uint32(b.at(0x140000 + abi.QHConsumer)); cons != 2 || !b.sawVector(5) {
		t.Fatalf("RX consumer %d, vector 5 signalled %v", cons, b.sawVector(5))
	}

	// TX: one frame to the peer, then a descriptor too short to be a frame.
	out := frame(60, 0x88b5)
	copy(out[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(out[6:12], fnMAC[:])
	copy(b.at(0x1b0000), out)
	b.ethDesc(0x130000, 0, 0x1b0000, 60)
	b.ethDesc(0x130000, 1, 0x1b0000, 5)
	binary.LittleEndian.PutUint32(b.at(0x130000+abi.QHProducer), 2)
	b.setReg(abi.RegEthTXProd, 2)
	b.sim.RunUntilIdle(0)
	if len(heard) != 1 || !bytes.Equal(heard[0], out) {
		t.Fatalf("the peer heard %d frames", len(heard))
	}
	if cons := binary.LittleEndian.Uint32(b.at(0x130000 + abi.QHConsumer)); cons != 2 || !b.sawVector(4) {
		t.Fatalf("TX consumer %d, vector 4 signalled %v", cons, b.sawVector(4))
	}

	// What each ring dropped: RX the frame too big and the one with no buffer; TX one.
	if _, res := b.cmd(abi.OpDestroyEthRing, []byte{abi.EthRX}); res[0] != 2 {
		t.Fatalf("RX dropped %d, want 2", res[0])
	}
	if _, res := b.cmd(abi.OpDestroyEthRing, []byte{abi.EthTX}); res[0] != 1 {
		t.Fatalf("TX dropped %d, want 1", res[0])
	}
	b.ok(abi.OpCreateEthRing, ethArgs(abi.EthTX, 4, 0x111000))
	for _, c := range []struct {
		name  string
		op    uint16
		args  []byte
		errno syscall.Errno
	}{
		{"second_tx_ring", abi.OpCreateEthRing, ethArgs(abi.EthTX, 4, 0x111000), syscall.EBUSY},
		{"unknown_kind", abi.OpCreateEthRing, ethArgs(7, 4, 0x111000), syscall.EINVAL},
		{"vector_past_msix", abi.OpCreateEthRing, ethArgs(abi.EthRX, abi.NumVectors, 0x112000), syscall.EINVAL},
		{"ring_unmapped", abi.OpCreateEthRing, ethArgs(abi.EthRX, 5, 0x900000), syscall.EFAULT},
		{"destroy_unknown", abi.OpDestroyEthRing, []byte{abi.EthRX}, syscall.ENOENT},
	} {
		if errno, _ := b.cmd(c.op, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}
}
