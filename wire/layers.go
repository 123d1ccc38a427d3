// Package wire owns RoCEv2 on the wire for tools: gopacket layers for the InfiniBand transport
// headers, and pcap and pcapng reading and writing, over the codec of wire/roce (header views, the
// opcode table, the ICRC, frame build and parse), whose names it re-exports. The engine imports
// wire/roce alone; the decoder, the captures and any gopacket user import wire.
package wire

import (
	"encoding/binary"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// LayerTypeRoCEv2 is the gopacket layer type of the InfiniBand transport headers in a RoCEv2
// packet. Importing wire registers it on UDP port 4791, so gopacket.NewPacket and
// gopacket.DecodingLayerParser decode RoCEv2 after the UDP layer.
var LayerTypeRoCEv2 = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeRoCEv2),
})

func init() {
	layers.RegisterUDPPortLayerType(UDPPort, LayerTypeRoCEv2)
}

// RoCEv2 is the gopacket layer for the BTH, the extension headers its opcode calls for, the pad
// and the ICRC. The extension headers are fields of this one layer rather than layers of their own:
// which of them follow depends on the BTH opcode, and a DecodingLayerParser gives a layer no way
// to see the layer before it, so separate layers could not be decoded exactly.
//
// Contents is the BTH and the extension headers; Payload is the data without pad or ICRC.
type RoCEv2 struct {
	layers.BaseLayer
	// Header holds every field; only those of the headers in Ext are meaningful.
	Header
	Ext    Ext
	TVer   uint8
	PadCnt uint8
	// ICRC is the value carried by the packet. Checking it needs the IP header: use Parser.Parse
	// on the whole frame.
	ICRC uint32
}

// LayerType returns LayerTypeRoCEv2.
func (r *RoCEv2) LayerType() gopacket.LayerType { return LayerTypeRoCEv2 }

// CanDecode returns LayerTypeRoCEv2.
func (r *RoCEv2) CanDecode() gopacket.LayerClass { return LayerTypeRoCEv2 }

// NextLayerType is the payload layer when there is data, and nothing after a header-only packet.
func (r *RoCEv2) NextLayerType() gopacket.LayerType {
	if len(r.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes the UDP payload of a RoCEv2 packet with the same checks as Parser
// (except the ICRC value), returning the same *Error values.
func (r *RoCEv2) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	f := Frame{Buf: data}
	if err := ParseTransport(&f, 0, len(data)); err != nil {
		if KindOf(err) == KindShort {
			df.SetTruncated()
		}
		return err
	}
	r.fromFrame(&f)
	return nil
}

func (r *RoCEv2) fromFrame(f *Frame) {
	r.Header = f.Header()
	r.Ext = f.Info.Ext
	r.TVer = f.BTH.TVer()
	r.PadCnt = uint8(f.Pad)
	r.ICRC = f.ICRC
	hdrEnd := f.BTHOff + BTHLen + r.Ext.Len()
	r.Contents = f.Buf[f.BTHOff:hdrEnd]
	r.BaseLayer.Payload = f.Payload
}

// SerializeTo writes the BTH and extension headers before the payload already in b, and the
// pad and ICRC after it. With opts.FixLengths the pad count follows the payload length. The
// ICRC written is r.ICRC: it covers the IP and UDP headers serialized after this layer, so compute
// it afterwards with Parser.Reseal (or build frames with Builder).
func (r *RoCEv2) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	info := r.Opcode.Info()
	if info == nil {
		return ErrBuildOpcode
	}
	payloadLen := len(b.Bytes())
	pad := int(r.PadCnt & 3)
	if opts.FixLengths {
		pad = PadFor(payloadLen)
		r.PadCnt = uint8(pad)
		r.Ext = info.Ext
	}
	tail, err := b.AppendBytes(pad + ICRCLen)
	if err != nil {
		return err
	}
	clear(tail[:pad])
	binary.LittleEndian.PutUint32(tail[pad:], r.ICRC)
	hdr, err := b.PrependBytes(BTHLen + r.Ext.Len())
	if err != nil {
		return err
	}
	h := BTH(hdr[:BTHLen])
	clear(h)
	h.SetOpcode(r.Opcode)
	h.SetSE(r.SE)
	h.SetMigReq(r.MigReq)
	h.SetPadCnt(pad)
	h.SetTVer(r.TVer)
	h.SetPKey(r.PKey)
	h.SetFECN(r.FECN)
	h.SetBECN(r.BECN)
	h.SetDestQP(r.DestQP)
	h.SetAckReq(r.AckReq)
	h.SetPSN(r.PSN)
	WriteExt(hdr[BTHLen:], r.Ext, &r.Header)
	return nil
}

func decodeRoCEv2(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCEv2{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	if len(r.Payload) == 0 {
		return nil
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}
