package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// MaxSnaplen bounds what a capture may claim for one frame (tcpdump's default snap length). pcapgo
// sizes its buffer from the file's snap length and record lengths, so an untrusted file is held
// to this bound before pcapgo sees it: a garbage length must give an error, not a 4 GiB allocation.
const MaxSnaplen = 262144

// LinkType is a capture's link type, a LINKTYPE_ value of tcpdump.org/linktypes.html.
// gopacket's layers.LinkType has 8 bits: it cannot hold Linux cooked capture v2 (276), which it
// reads as 20, so the reader takes the link type from the file itself.
type LinkType uint32

// Link types the decoder understands: Ethernet, raw IP in its several spellings, and Linux cooked
// capture v1 and v2 (what tcpdump -i any writes; v2 since libpcap 1.10).
const (
	LinkTypeEthernet  LinkType = 1
	LinkTypeRawBSD    LinkType = 12 // DLT_RAW's value on most BSDs, found in old captures
	LinkTypeRawBSD14  LinkType = 14 // DLT_RAW's value on OpenBSD
	LinkTypeRaw       LinkType = 101
	LinkTypeLinuxSLL  LinkType = 113
	LinkTypeIPv4      LinkType = 228
	LinkTypeIPv6      LinkType = 229
	LinkTypeLinuxSLL2 LinkType = 276
)

// String gives the number and, when known, a name: "276 (Linux cooked v2)", "105 (IEEE802_11)".
func (t LinkType) String() string {
	n := strconv.FormatUint(uint64(t), 10)
	switch t {
	case LinkTypeRawBSD, LinkTypeRawBSD14, LinkTypeRaw:
		return n + " (raw IP)"
	case LinkTypeLinuxSLL:
		return n + " (Linux cooked)"
	case LinkTypeLinuxSLL2:
		return n + " (Linux cooked v2)"
	}
	if t < 256 {
		if name := layers.LinkType(t).String(); !strings.HasPrefix(name, "UnknownLinkType") {
			return n + " (" + name + ")"
		}
	}
	return n
}

// Linux cooked capture headers: v1 (LINKTYPE_LINUX_SLL) is packet type, ARPHRD type, address
// length, 8 address bytes and the protocol (an EtherType for IP); v2 (LINKTYPE_LINUX_SLL2) is the
// protocol, 2 reserved bytes, the interface index, ARPHRD type, packet type, address length and 8
// address bytes. Both are big-endian.
const (
	SLLLen       = 16
	SLLProtoOff  = 14
	SLL2Len      = 20
	SLL2ProtoOff = 0
)

// packetSource is what pcapgo's pcap and pcapng readers have in common.
type packetSource interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// PcapReader reads classic pcap (either byte order, micro- or nanosecond) and pcapng, told apart
// by the file's magic number.
type PcapReader struct {
	src  packetSource
	link LinkType
	// deferred is a structural error found in a pcapng file while validating it: the blocks before
	// it are read normally, then Next returns it.
	deferred error
	ng       bool
}

var pcapngMagic = []byte{0x0A, 0x0D, 0x0D, 0x0A}

// isPcapMagic says whether b begins a classic pcap file: micro- or nanosecond timestamps, in
// either byte order.
func isPcapMagic(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	for _, m := range []uint32{binary.LittleEndian.Uint32(b), binary.BigEndian.Uint32(b)} {
		if m == 0xA1B2C3D4 || m == 0xA1B23C4D {
			return true
		}
	}
	return false
}

// NewPcapReader reads the file header from r. A pcapng file is read into memory and its block
// structure checked first, since pcapgo trusts the lengths it finds there.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil && len(magic) == 0 && errors.Is(err, io.EOF) {
		return nil, errors.New("wire: the capture is empty")
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wire: reading capture header: %w", err)
	}
	if !bytes.Equal(magic, pcapngMagic) && !isPcapMagic(magic) {
		start, _ := br.Peek(16)
		return nil, fmt.Errorf("wire: not a pcap or pcapng capture: it begins %q", start)
	}
	if bytes.Equal(magic, pcapngMagic) {
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, fmt.Errorf("wire: reading pcapng: %w", err)
		}
		good, link, verr := sanitizePcapng(data)
		ng, err := newNgReader(good)
		if err != nil {
			if verr != nil {
				// The structural problem explains the failure better than pcapgo does.
				return nil, verr
			}
			if err == errReaderPanic {
				return nil, err
			}
			return nil, fmt.Errorf("wire: pcapng: %w", err)
		}
		return &PcapReader{src: ng, link: link, deferred: verr, ng: true}, nil
	}
	// pcapgo keeps only the low 8 bits of the link type: read it from the header here. The
	// field's low 26 bits are the link type, the rest tell about a frame check sequence.
	var link LinkType
	if hdr, err := br.Peek(24); err == nil {
		var order binary.ByteOrder = binary.BigEndian
		if m := binary.LittleEndian.Uint32(hdr); m == 0xA1B2C3D4 || m == 0xA1B23C4D {
			order = binary.LittleEndian
		}
		link = LinkType(order.Uint32(hdr[20:]) & 0x03FFFFFF)
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("wire: pcap: %w", err)
	}
	if s := pr.Snaplen(); s == 0 || s > MaxSnaplen {
		pr.SetSnaplen(MaxSnaplen)
	}
	return &PcapReader{src: pr, link: link}, nil
}

// Link is the link type of the file (of the first interface for pcapng).
func (r *PcapReader) Link() LinkType { return r.link }

// LinkType is Link as gopacket's enum, which has 8 bits: it is only meaningful when Link is below
// 256. For a larger link type it returns 255, which gopacket does not decode.
func (r *PcapReader) LinkType() layers.LinkType {
	if r.link > 255 {
		return 255
	}
	return layers.LinkType(r.link)
}

// IsPcapng says whether the file is pcapng.
func (r *PcapReader) IsPcapng() bool { return r.ng }

// errReaderPanic stands for a panic inside pcapgo: its pcapng option parsing indexes option
// values without checking their length and divides by a timestamp resolution that a hostile
// if_tsresol makes zero. A capture is input from strangers, so the reader turns such a panic into
// an error for that file instead of taking the process down.
var errReaderPanic = errors.New("wire: capture structure not understood (pcapgo panicked)")

func newNgReader(data []byte) (ng *pcapgo.NgReader, err error) {
	defer func() {
		if recover() != nil {
			ng, err = nil, errReaderPanic
		}
	}()
	return pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
}

// Next returns the next frame. data is reused by the following call. At the end it returns
// io.EOF; a file cut in the middle of a record gives io.ErrUnexpectedEOF.
func (r *PcapReader) Next() (data []byte, ci gopacket.CaptureInfo, err error) {
	defer func() {
		if recover() != nil {
			data, err = nil, errReaderPanic
		}
	}()
	data, ci, err = r.src.ZeroCopyReadPacketData()
	if err == io.EOF && r.deferred != nil {
		err, r.deferred = r.deferred, nil
	}
	if err == nil && (ci.CaptureLength != len(data) || ci.CaptureLength > MaxSnaplen) {
		err = errors.New("wire: pcap record length inconsistent")
	}
	return data, ci, err
}

// Structural problems sanitizePcapng finds in a pcapng file.
var (
	errNgTruncated    = errors.New("wire: pcapng: truncated block")
	errNgSection      = errors.New("wire: pcapng: truncated section header")
	errNgByteOrder    = errors.New("wire: pcapng: bad byte-order magic")
	errNgBlockLength  = errors.New("wire: pcapng: bad block length")
	errNgInterface    = errors.New("wire: pcapng: short interface block")
	errNgPacket       = errors.New("wire: pcapng: bad packet block")
	errNgSimplePacket = errors.New("wire: pcapng: bad simple packet block")
)

// sanitizePcapng walks the pcapng block structure and returns the prefix made of well-formed
// blocks, with interface snap lengths held to MaxSnaplen, the link type of the first interface,
// and the first structural problem found.
func sanitizePcapng(data []byte) ([]byte, LinkType, error) {
	var (
		order   binary.ByteOrder = binary.LittleEndian
		link    LinkType
		hasLink bool
	)
	off := 0
	for off < len(data) {
		if len(data)-off < 12 {
			return data[:off], link, errNgTruncated
		}
		typ := binary.LittleEndian.Uint32(data[off:])
		if typ == 0x0A0D0D0A {
			if len(data)-off < 28 {
				return data[:off], link, errNgSection
			}
			switch {
			case binary.LittleEndian.Uint32(data[off+8:]) == 0x1A2B3C4D:
				order = binary.LittleEndian
			case binary.BigEndian.Uint32(data[off+8:]) == 0x1A2B3C4D:
				order = binary.BigEndian
			default:
				return data[:off], link, errNgByteOrder
			}
		} else {
			typ = order.Uint32(data[off:])
		}
		n := int(order.Uint32(data[off+4:]))
		if n < 12 || n%4 != 0 || n > len(data)-off || order.Uint32(data[off+n-4:]) != uint32(n) {
			return data[:off], link, errNgBlockLength
		}
		blk := data[off : off+n]
		switch typ {
		case 1: // interface description: link type, reserved, snap length
			if n < 20 {
				return data[:off], link, errNgInterface
			}
			if !hasLink {
				link, hasLink = LinkType(order.Uint16(blk[8:])), true
			}
			if s := order.Uint32(blk[12:]); s == 0 || s > MaxSnaplen {
				order.PutUint32(blk[12:], MaxSnaplen)
			}
		case 2, 6: // (obsolete) packet block, enhanced packet block
			if n < 32 || int(order.Uint32(blk[20:])) > n-32 {
				return data[:off], link, errNgPacket
			}
		case 3: // simple packet block: original length, data
			if n < 16 || int(order.Uint32(blk[8:])) > n-16 {
				return data[:off], link, errNgSimplePacket
			}
		}
		off += n
	}
	return data, link, nil
}

// NewPcapWriter writes a classic pcap header (nanosecond timestamps, Ethernet) to w and returns a
// pcapgo writer for the frames.
func NewPcapWriter(w io.Writer) (*pcapgo.Writer, error) {
	return NewPcapWriterLink(w, LinkTypeEthernet)
}

// NewPcapWriterLink is NewPcapWriter for any link type. It writes the file header itself, since
// pcapgo's takes an 8-bit link type.
func NewPcapWriterLink(w io.Writer, link LinkType) (*pcapgo.Writer, error) {
	var hdr [24]byte
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], 0xA1B23C4D) // nanosecond timestamps
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], MaxSnaplen)
	le.PutUint32(hdr[20:], uint32(link))
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, err
	}
	return pcapgo.NewWriterNanos(w), nil
}

// NewPcapngWriter returns a pcapng writer for Ethernet frames; call Flush at the end.
func NewPcapngWriter(w io.Writer) (*pcapgo.NgWriter, error) {
	return pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
}
