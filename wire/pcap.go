package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// MaxSnaplen bounds what a capture may claim for one frame (tcpdump's default snap length). pcapgo
// sizes its buffer from the file's snap length and record lengths, so an untrusted file is held
// to this bound before pcapgo sees it: a garbage length must give an error, not a 4 GiB allocation.
const MaxSnaplen = 262144

// Link types the decoder understands besides Ethernet: raw IP in its three spellings, and Linux
// cooked capture (what tcpdump -i any writes).
const (
	LinkTypeRaw      = layers.LinkTypeRaw // 101
	LinkTypeIPv4     = layers.LinkTypeIPv4
	LinkTypeIPv6     = layers.LinkTypeIPv6
	LinkTypeLinuxSLL = layers.LinkTypeLinuxSLL
	linkTypeRawBSD   = 12 // DLT_RAW's value on most BSDs, found in old captures
	linkTypeRawBSD14 = 14
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
	link layers.LinkType
	// deferred is a structural error found in a pcapng file while validating it: the blocks before
	// it are read normally, then Next returns it.
	deferred error
	ng       bool
}

var pcapngMagic = []byte{0x0A, 0x0D, 0x0D, 0x0A}

// NewPcapReader reads the file header from r. A pcapng file is read into memory and its block
// structure checked first, since pcapgo trusts the lengths it finds there.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("wire: reading capture header: %w", err)
	}
	if bytes.Equal(magic, pcapngMagic) {
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, fmt.Errorf("wire: reading pcapng: %w", err)
		}
		good, verr := sanitizePcapng(data)
		ng, err := newNgReader(good)
		if err != nil {
			if verr != nil {
				err = verr
			}
			return nil, fmt.Errorf("wire: pcapng: %w", err)
		}
		return &PcapReader{src: ng, link: ng.LinkType(), deferred: verr, ng: true}, nil
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("wire: pcap: %w", err)
	}
	if s := pr.Snaplen(); s == 0 || s > MaxSnaplen {
		pr.SetSnaplen(MaxSnaplen)
	}
	return &PcapReader{src: pr, link: pr.LinkType()}, nil
}

// LinkType is the link type of the file (of the first interface for pcapng).
func (r *PcapReader) LinkType() layers.LinkType { return r.link }

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

// sanitizePcapng walks the pcapng block structure and returns the prefix made of well-formed
// blocks, with interface snap lengths held to MaxSnaplen, and the first structural problem found.
func sanitizePcapng(data []byte) ([]byte, error) {
	var order binary.ByteOrder = binary.LittleEndian
	off := 0
	for off < len(data) {
		if len(data)-off < 12 {
			return data[:off], errors.New("wire: pcapng: truncated block")
		}
		typ := binary.LittleEndian.Uint32(data[off:])
		if typ == 0x0A0D0D0A {
			if len(data)-off < 28 {
				return data[:off], errors.New("wire: pcapng: truncated section header")
			}
			switch {
			case binary.LittleEndian.Uint32(data[off+8:]) == 0x1A2B3C4D:
				order = binary.LittleEndian
			case binary.BigEndian.Uint32(data[off+8:]) == 0x1A2B3C4D:
				order = binary.BigEndian
			default:
				return data[:off], errors.New("wire: pcapng: bad byte-order magic")
			}
		} else {
			typ = order.Uint32(data[off:])
		}
		n := int(order.Uint32(data[off+4:]))
		if n < 12 || n%4 != 0 || n > len(data)-off || order.Uint32(data[off+n-4:]) != uint32(n) {
			return data[:off], errors.New("wire: pcapng: bad block length")
		}
		blk := data[off : off+n]
		switch typ {
		case 1: // interface description: link type, reserved, snap length
			if n < 20 {
				return data[:off], errors.New("wire: pcapng: short interface block")
			}
			if s := order.Uint32(blk[12:]); s == 0 || s > MaxSnaplen {
				order.PutUint32(blk[12:], MaxSnaplen)
			}
		case 2, 6: // (obsolete) packet block, enhanced packet block
			if n < 32 || int(order.Uint32(blk[20:])) > n-32 {
				return data[:off], errors.New("wire: pcapng: bad packet block")
			}
		case 3: // simple packet block: original length, data
			if n < 16 || int(order.Uint32(blk[8:])) > n-16 {
				return data[:off], errors.New("wire: pcapng: bad simple packet block")
			}
		}
		off += n
	}
	return data, nil
}

// NewPcapWriter writes a classic pcap header (nanosecond timestamps, Ethernet) to w and returns a
// pcapgo writer for the frames.
func NewPcapWriter(w io.Writer) (*pcapgo.Writer, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(MaxSnaplen, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return pw, nil
}

// NewPcapngWriter returns a pcapng writer for Ethernet frames; call Flush at the end.
func NewPcapngWriter(w io.Writer) (*pcapgo.NgWriter, error) {
	return pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
}
