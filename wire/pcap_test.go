package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/google/gopacket/layers"
)

// TestPcapReaderHostile: lengths in a capture are input from strangers. Huge snap lengths and
// record lengths must give errors, not allocations of gigabytes or panics.
func TestPcapReaderHostile(t *testing.T) {
	le := binary.LittleEndian
	// Classic pcap: snap length 4 GiB - 1, one record claiming 2 GiB.
	hdr := make([]byte, 24+16)
	le.PutUint32(hdr[0:], 0xA1B2C3D4)
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], 0xFFFFFFFF)
	le.PutUint32(hdr[20:], 1)
	le.PutUint32(hdr[24+8:], 0x80000000)
	le.PutUint32(hdr[24+12:], 0x80000000)
	r, err := NewPcapReader(bytes.NewReader(hdr))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("2 GiB record: %v", err)
	}

	// pcapng: section header, interface with snap length 4 GiB - 1, a packet block whose
	// captured length runs past the block.
	idb := make([]byte, 8)
	le.PutUint16(idb[0:], 1)
	le.PutUint32(idb[4:], 0xFFFFFFFF)
	epb := make([]byte, 20+8)
	le.PutUint32(epb[12:], 0x7FFFFFF0) // captured length
	le.PutUint32(epb[16:], 0x7FFFFFF0)
	r, err = NewPcapReader(bytes.NewReader(pcapngBlocks(ngBlock(1, idb), ngBlock(6, epb))))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("packet block longer than itself: %v", err)
	}
	if !r.IsPcapng() {
		t.Error("not recognised as pcapng")
	}
}

// TestPcapngHostileOptions: an interface whose if_tsresol asks for 2^-64 s makes pcapgo divide
// by zero, and an empty if_tsresol makes it index an empty slice. Both must be errors.
func TestPcapngHostileOptions(t *testing.T) {
	le := binary.LittleEndian
	for name, opt := range map[string][]byte{
		"tsresol 2^-64":  {9, 0, 1, 0, 0xC0, 0, 0, 0},
		"tsresol empty":  {9, 0, 0, 0},
		"tsoffset short": {14, 0, 1, 0, 1, 0, 0, 0},
		"filter empty":   {11, 0, 0, 0},
	} {
		idb := make([]byte, 8)
		le.PutUint16(idb[0:], 1)
		idb = append(idb, opt...)
		idb = append(idb, 0, 0, 0, 0) // end of options
		epb := make([]byte, 20+4)
		le.PutUint32(epb[4:], 1)
		le.PutUint32(epb[12:], 4)
		le.PutUint32(epb[16:], 4)
		r, err := NewPcapReader(bytes.NewReader(pcapngBlocks(ngBlock(1, idb), ngBlock(6, epb))))
		for i := 0; err == nil && i < 3; i++ {
			_, _, err = r.Next()
		}
		if name == "tsresol 2^-64" && (err == nil || errors.Is(err, io.EOF)) {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
}

// ngBlock is a little-endian pcapng block: type, length, body, length.
func ngBlock(typ uint32, body []byte) []byte {
	le := binary.LittleEndian
	n := uint32(12 + len(body))
	b := le.AppendUint32(le.AppendUint32(nil, typ), n)
	return le.AppendUint32(append(b, body...), n)
}

// pcapngBlocks is a little-endian pcapng: a section header, then the given blocks.
func pcapngBlocks(blocks ...[]byte) []byte {
	le := binary.LittleEndian
	shb := make([]byte, 16)
	le.PutUint32(shb[0:], 0x1A2B3C4D)
	le.PutUint16(shb[4:], 1)
	le.PutUint64(shb[8:], 0xFFFFFFFFFFFFFFFF)
	return bytes.Join(append([][]byte{ngBlock(0x0A0D0D0A, shb)}, blocks...), nil)
}

// interfaceBlock is a pcapng interface description block of the link type.
func interfaceBlock(link uint16) []byte {
	b := binary.LittleEndian.AppendUint16(nil, link)
	return ngBlock(1, binary.LittleEndian.AppendUint32(append(b, 0, 0), MaxSnaplen))
}

// TestPcapLinkType: the link type is read whole. gopacket's is 8 bits, so Linux cooked v2 (276)
// would be 20 and 257 would be Ethernet.
func TestPcapLinkType(t *testing.T) {
	for _, link := range []LinkType{LinkTypeEthernet, LinkTypeLinuxSLL, LinkTypeLinuxSLL2, 257, 0xFFFF} {
		var b bytes.Buffer
		if _, err := NewPcapWriterLink(&b, link); err != nil {
			t.Fatal(err)
		}
		le := b.Bytes()
		be := make([]byte, 24) // the same header written big-endian, with microseconds
		binary.BigEndian.PutUint32(be[0:], 0xA1B2C3D4)
		binary.BigEndian.PutUint16(be[4:], 2)
		binary.BigEndian.PutUint16(be[6:], 4)
		binary.BigEndian.PutUint32(be[16:], MaxSnaplen)
		binary.BigEndian.PutUint32(be[20:], 0x10000000|uint32(link)) // with an FCS length of 0 bytes flagged
		for name, data := range map[string][]byte{
			"pcap":    le,
			"pcap BE": be,
			"pcapng":  pcapngBlocks(interfaceBlock(uint16(link))),
		} {
			r, err := NewPcapReader(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s %d: %v", name, link, err)
			}
			if r.Link() != link {
				t.Errorf("%s: link type %v, want %v", name, r.Link(), link)
			}
			if want := layers.LinkType(link); link < 256 && r.LinkType() != want || link > 255 && r.LinkType() != 255 {
				t.Errorf("%s %d: gopacket link type %d", name, link, r.LinkType())
			}
		}
	}
	if got := LinkTypeLinuxSLL2.String(); got != "276 (Linux cooked v2)" {
		t.Errorf("String() = %q", got)
	}
}

// TestPcapngErrorText: a structural problem found before any packet is the whole error, said once.
func TestPcapngErrorText(t *testing.T) {
	bad := interfaceBlock(1)
	binary.LittleEndian.PutUint32(bad[4:], 24) // its trailing length says 20
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"bad block length": {pcapngBlocks(bad), "wire: pcapng: bad block length"},
		"short interface":  {pcapngBlocks([]byte{1, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0}), "wire: pcapng: short interface block"},
		"truncated block":  {pcapngBlocks([]byte{1, 0, 0, 0, 20}), "wire: pcapng: truncated block"},
	} {
		_, err := NewPcapReader(bytes.NewReader(c.data))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// TestNotACapture: a file that is no capture at all is called that, with how it begins, instead
// of pcapgo's "Unknown magic" in hex or a bare "unexpected EOF".
func TestNotACapture(t *testing.T) {
	for data, want := range map[string]string{
		"":                               "wire: the capture is empty",
		"ab":                             `wire: not a pcap or pcapng capture: it begins "ab"`,
		"hello world, this is some text": `wire: not a pcap or pcapng capture: it begins "hello world, thi"`,
		"\xd4\xc3\xb2\xa1\x02\x00":       "wire: pcap: unexpected EOF",
	} {
		_, err := NewPcapReader(bytes.NewReader([]byte(data)))
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", data, err, want)
		}
	}
}
