package wire

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseCaptured cuts arbitrary frames as a capture's snap length does (the first cut bytes
// of a frame of len(b)+extra bytes on the wire) and parses them as Ethernet and as raw IP. It
// must never panic and return only *Error values; what it accepts has sane offsets; and when the
// uncut bytes are a frame the parser accepts (but for the ICRC, which a cut frame cannot show),
// the cut one, once it holds the headers, has the same headers and payload length, and before
// that, an error naming the header it ends in.
func FuzzParseCaptured(f *testing.F) {
	for i, b := range fuzzSeeds(f) {
		f.Add(b, uint16(54+i%80), uint16(0))
		f.Add(b, uint16(128), uint16(i%3))
	}
	var p Parser
	f.Fuzz(func(t *testing.T, b []byte, cut, extra uint16) {
		n := min(int(cut), len(b))
		for _, c := range []struct {
			whole func(*Frame, []byte) error
			cut   func(*Frame, []byte, int) error
		}{{p.Parse, p.ParseCaptured}, {p.ParseIP, p.ParseCapturedIP}} {
			var fr, whole Frame
			err := c.cut(&fr, b[:n], len(b)+int(extra))
			var we *Error
			if err != nil && !errors.As(err, &we) {
				t.Fatalf("foreign error %T %v", err, err)
			}
			if err == nil || KindOf(err) == KindBadICRC {
				if fr.BTHOff+BTHLen > fr.End || len(fr.Payload) > fr.PayloadLen() || fr.PayloadLen() < 0 ||
					fr.BTHOff+BTHLen+fr.Info.Ext.Len()+fr.PayloadLen()+fr.Pad+ICRCLen != fr.End {
					t.Fatalf("offsets out of range: %+v", fr)
				}
				if fr.Truncated() && (err != nil || fr.ICRC != 0 || fr.End-fr.L3 > len(b)+int(extra)-fr.L3) {
					t.Fatalf("truncated frame: %v, ICRC %#x, end %d", err, fr.ICRC, fr.End)
				}
			}
			werr := c.whole(&whole, b)
			if werr != nil && KindOf(werr) != KindBadICRC || extra != 0 {
				continue
			}
			hdrEnd := whole.BTHOff + BTHLen + whole.Info.Ext.Len()
			switch {
			case n >= whole.End:
				if err != werr {
					t.Fatalf("whole IP packet held: %v, uncut %v", err, werr)
				}
			case n >= hdrEnd:
				if err != nil || fr.Header() != whole.Header() || fr.PayloadLen() != len(whole.Payload) ||
					!bytes.Equal(fr.Payload, whole.Payload[:len(fr.Payload)]) {
					t.Fatalf("cut at %d of %d: %v %+v, uncut %+v", n, len(b), err, fr.Header(), whole.Header())
				}
			default:
				if KindOf(err) != KindShort || CutInside(err) == "" {
					t.Fatalf("cut at %d before the headers end (%d): %v", n, hdrEnd, err)
				}
			}
		}
	})
}
