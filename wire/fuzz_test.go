package wire

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// fuzzSeeds are the captured rxe frames plus a built frame of every opcode over IPv6.
func fuzzSeeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, name := range captureFiles {
		frames := roceFrames(f, name)
		out = append(out, frames[:min(len(frames), 8)]...)
	}
	for _, c := range allCases() {
		if c.path != path6 || len(c.payload) > 4 {
			continue
		}
		b, err := NewBuilder(c.path).Build(make([]byte, 512), &c.hdr, c.payload)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzParse feeds arbitrary bytes to the parser as an Ethernet frame and as an IP packet. It must
// never panic, return only *Error values, and agree with the gopacket layer on every frame it
// accepts (or accepts but for the ICRC).
func FuzzParse(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	var p Parser
	var fr Frame
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func(*Frame, []byte) error{p.Parse, p.ParseIP} {
			err := parse(&fr, b)
			var we *Error
			if err != nil && !errors.As(err, &we) {
				t.Fatalf("foreign error %T %v", err, err)
			}
			if err != nil && KindOf(err) != KindBadICRC {
				continue
			}
			if fr.End > len(b) || fr.BTHOff+BTHLen > fr.End || len(fr.Payload)+fr.Pad > fr.End-fr.BTHOff {
				t.Fatalf("offsets out of range: %+v", fr)
			}
			if (err == nil) != (p.ICRC(&fr) == fr.ICRC) {
				t.Fatalf("ICRC verdict %v disagrees with recomputation", err)
			}
			var l RoCEv2
			if lerr := l.DecodeFromBytes(b[fr.BTHOff:fr.End], gopacket.NilDecodeFeedback); lerr != nil {
				t.Fatalf("parser accepts, layer rejects: %v", lerr)
			}
			if l.Header != fr.Header() || !bytes.Equal(l.Payload, fr.Payload) || l.ICRC != fr.ICRC {
				t.Fatalf("layer and parser disagree:\n%+v\n%+v", l.Header, fr.Header())
			}
			// Resealing a copy must give a frame that verifies.
			c := append([]byte(nil), b...)
			var cf Frame
			if err2 := parse(&cf, c); err2 != err || cf.End != fr.End {
				t.Fatalf("reparse differs: %v / %v", err2, err)
			}
			p.Reseal(&cf)
			if err := parse(&cf, c); err != nil {
				t.Fatalf("resealed frame: %v", err)
			}
		}
	})
}

// FuzzLayer decodes arbitrary UDP payloads with the gopacket layer, standalone and through
// gopacket.NewPacket; what it accepts must serialize and decode back to the same fields.
func FuzzLayer(f *testing.F) {
	var p Parser
	var fr Frame
	for _, b := range fuzzSeeds(f) {
		if p.Parse(&fr, b) == nil {
			f.Add(b[fr.BTHOff:fr.End])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var l RoCEv2
		err := l.DecodeFromBytes(b, gopacket.NilDecodeFeedback)
		// Through gopacket's own decoding path: never a panic.
		pkt := gopacket.NewPacket(b, LayerTypeRoCEv2, gopacket.Default)
		if (pkt.ErrorLayer() == nil) != (err == nil) {
			t.Fatalf("NewPacket and DecodeFromBytes disagree: %v / %v", pkt.ErrorLayer(), err)
		}
		if err != nil {
			return
		}
		sb := gopacket.NewSerializeBuffer()
		payload := gopacket.Payload(append([]byte(nil), l.Payload...))
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{}, &l, payload); err != nil {
			t.Fatal(err)
		}
		var back RoCEv2
		if err := back.DecodeFromBytes(sb.Bytes(), gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("serialized layer does not decode: %v", err)
		}
		if back.Header != l.Header || back.PadCnt != l.PadCnt || back.ICRC != l.ICRC || !bytes.Equal(back.Payload, l.Payload) {
			t.Fatalf("round trip:\n%+v\n%+v", back, l)
		}
	})
}

// FuzzPcapReader reads arbitrary files as captures: errors are fine, panics and runaway
// allocations are not.
func FuzzPcapReader(f *testing.F) {
	for _, name := range captureFiles {
		data, err := os.ReadFile("../testdata/pcap/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:min(len(data), 600)])
	}
	// A pcapng of two frames.
	var ng bytes.Buffer
	w, err := NewPcapngWriter(&ng)
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range fuzzSeeds(f)[:2] {
		if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(b), Length: len(b)}, b); err != nil {
			f.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Fatal(err)
	}
	f.Add(ng.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewPcapReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		_ = r.LinkType() == layers.LinkTypeEthernet
		for range 1000 {
			b, ci, err := r.Next()
			if err != nil {
				return // io.EOF, or a structural error: both end the file
			}
			if len(b) != ci.CaptureLength || len(b) > MaxSnaplen {
				t.Fatalf("record of %d bytes, caplen %d", len(b), ci.CaptureLength)
			}
		}
	})
}
