package vfiouser

import (
	"bytes"
	"io"
	"syscall"
	"testing"
)

// The client's requests, byte for byte as the vfio-user specification lays them out (each
// u32 or u64 little-endian at its offset), independent of the views both sides share: a view
// wrong on both sides would still agree with itself.
func TestRequestBytes(t *testing.T) {
	u64 := func(v uint64) []byte { return u32s(uint32(v), uint32(v>>32)) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		call func(c *Client) error
		cmd  Command
		want []byte
	}{
		{"DMA_MAP", func(c *Client) error { return c.DMAMap(0x1000, 0x2000, -1, 0x3000, DMARead|DMAWrite) },
			CmdDMAMap, cat(u32s(32, DMARead|DMAWrite), u64(0x3000), u64(0x1000), u64(0x2000))},
		{"DMA_UNMAP", func(c *Client) error { return c.DMAUnmap(0x1000, 0x2000, false) },
			CmdDMAUnmap, cat(u32s(24, 0), u64(0x1000), u64(0x2000))},
		{"DMA_UNMAP all", func(c *Client) error { return c.DMAUnmap(0, 0, true) },
			CmdDMAUnmap, cat(u32s(24, DMAUnmapAll), u64(0), u64(0))},
		{"DEVICE_GET_INFO", func(c *Client) error { _, err := c.GetDeviceInfo(); return err },
			CmdDeviceGetInfo, u32s(16, 0, 0, 0)},
		{"DEVICE_GET_REGION_INFO", func(c *Client) error { _, err := c.GetRegionInfo(7); return err },
			CmdRegionInfo, cat(u32s(32, 0, 7, 0), u64(0), u64(0))},
		{"DEVICE_GET_IRQ_INFO", func(c *Client) error { _, err := c.GetIRQInfo(2); return err },
			CmdIRQInfo, u32s(16, 0, 2, 0)},
		{"DEVICE_SET_IRQS", func(c *Client) error { return c.SetIRQs(IRQDataBool|IRQActionMask, 2, 1, 3, []byte{1, 0, 1}, nil) },
			CmdSetIRQs, cat(u32s(23, IRQDataBool|IRQActionMask, 2, 1, 3), []byte{1, 0, 1})},
		{"REGION_READ", func(c *Client) error { return c.RegionRead(4, 0x123456789, make([]byte, 8)) },
			CmdRegionRead, cat(u64(0x123456789), u32s(4, 8))},
		{"REGION_WRITE", func(c *Client) error { return c.RegionWrite(2, 0x10, []byte{9, 8, 7}, false) },
			CmdRegionWrite, cat(u64(0x10), u32s(2, 3), []byte{9, 8, 7})},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := socketpair(t)
			defer a.Close()
			client := NewClient(b)
			defer client.Close()
			done := make(chan error, 1)
			go func() { done <- c.call(client) }()
			var hb [HeaderSize]byte
			if _, err := io.ReadFull(a, hb[:]); err != nil {
				t.Fatal(err)
			}
			h := parseHeader(hb[:])
			body := make([]byte, int(h.Size)-HeaderSize)
			if _, err := io.ReadFull(a, body); err != nil {
				t.Fatal(err)
			}
			if h.Cmd != c.cmd || h.Flags != FlagCommand || !bytes.Equal(body, c.want) {
				t.Errorf("%s flags 0x%x body % x, want %s % x", h.Cmd, h.Flags, body, c.cmd, c.want)
			}
			// An error reply ends the call.
			reply := make([]byte, HeaderSize)
			Header{ID: h.ID, Cmd: h.Cmd, Size: HeaderSize, Flags: FlagReply | FlagError, Errno: uint32(syscall.EIO)}.put(reply)
			if _, err := a.Write(reply); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, c.name, <-done, syscall.EIO)
		})
	}
}

// REGION_WRITE_MULTI: the count as a u64, then 24-byte entries of offset, region, count and
// 8 bytes of data.
func TestWriteMultiBytes(t *testing.T) {
	a, b := socketpair(t)
	defer a.Close()
	client := NewClient(b)
	defer client.Close()
	if err := client.WriteMulti([]Write{{Region: 2, Offset: 0x40, Data: []byte{1, 2, 3, 4}}, {Region: 0, Offset: 8, Data: []byte{5}}}); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, HeaderSize+8+2*multiWrEntry)
	if _, err := io.ReadFull(a, msg); err != nil {
		t.Fatal(err)
	}
	want := bytes.Join([][]byte{u32s(2, 0), u32s(0x40, 0, 2, 4), {1, 2, 3, 4, 0, 0, 0, 0}, u32s(8, 0, 0, 1), {5, 0, 0, 0, 0, 0, 0, 0}}, nil)
	if h := parseHeader(msg); h.Cmd != CmdRegionWriteMulti || h.Flags != FlagNoReply || !bytes.Equal(msg[HeaderSize:], want) {
		t.Errorf("%s flags 0x%x body % x, want % x", h.Cmd, h.Flags, msg[HeaderSize:], want)
	}
}
