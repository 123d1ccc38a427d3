package main

import (
	"bytes"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
)

var (
	faultLine = regexp.MustCompile(`^[1-9][0-9]* fired=[0-9]+ seen=[0-9]+ \S`)
	portLine  = regexp.MustCompile(`^port [a-z]+ in_frames=[0-9]+ in_bytes=[0-9]+ out_frames=[0-9]+ out_bytes=[0-9]+ dropped=[0-9]+ queued=[0-9]+$`)
	addedLine = regexp.MustCompile(`^ok [1-9][0-9]*$`)
)

// fabricWithAQueuedFrame is a switch with ports a and b, a's one frame (a 60-byte broadcast)
// queued for b's reader: ports then has counts to print on both sides.
func fabricWithAQueuedFrame(tb testing.TB) (*ethswitch.Switch, *ethswitch.Port) {
	tb.Helper()
	sw := ethswitch.New()
	pa, pb := sw.NewPort("a"), sw.NewPort("b")
	broadcast := append(bytes.Repeat([]byte{0xff}, 6), make([]byte, 54)...)
	if _, err := pa.SendBatch([][]byte{broadcast}); err != nil {
		tb.Fatal(err)
	}
	return sw, pb
}

// FuzzControlCommand: whatever line a peer of the owner sends, the control socket answers it
// and ends with exactly one "ok" or "error" line; an error is the whole answer and changes no
// fault; only "ok" to add or remove changes the plan, by one; a listing's lines are well formed.
func FuzzControlCommand(f *testing.F) {
	for _, s := range []string{"list", "ports", "add drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3",
		"add corrupt from=b nth=2", "add flap from=a for=2s", "add delay from=a delay=5ms",
		"add duplicate from=b qp=0x11 psn=7 count=2 name=dup", "remove 1", "remove -1",
		"remove 99999999999999999999", "list extra", "ports x", "add", "add drop from=c", "", "\x00\xff", "add drop nth=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsRune(line, '\n') {
			return // the socket reads lines: a newline splits a command in two
		}
		sw, _ := fabricWithAQueuedFrame(t)
		plan := &faultplan.Live{}
		plan.Add(faultplan.Fault{Src: "a", Nth: 1}) // fault 1, so that remove and list have something
		c := &controlServer{plan: plan, sw: sw, names: []string{"a", "b"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		before := len(plan.List())
		var out bytes.Buffer
		cmd := strings.TrimSpace(line)
		c.command(&out, cmd)
		answer := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if !strings.HasSuffix(out.String(), "\n") {
			t.Fatalf("%q: answer %q does not end its last line", line, out.String())
		}
		last, listing := answer[len(answer)-1], answer[:len(answer)-1]
		after := len(plan.List())
		switch {
		case strings.HasPrefix(last, "error "):
			if len(listing) != 0 || after != before {
				t.Fatalf("%q: an error after %d lines, faults %d -> %d: %q", line, len(listing), before, after, out.String())
			}
		case last == "ok":
			verb, _, _ := strings.Cut(cmd, " ")
			want := before
			if verb == "remove" {
				want--
			}
			if after != want {
				t.Fatalf("%q: faults %d -> %d", line, before, after)
			}
			for _, l := range listing {
				if !faultLine.MatchString(l) && !portLine.MatchString(l) {
					t.Fatalf("%q: listing line %q", line, l)
				}
			}
		case addedLine.MatchString(last):
			if len(listing) != 0 || after != before+1 {
				t.Fatalf("%q: added, faults %d -> %d: %q", line, before, after, out.String())
			}
		default:
			t.Fatalf("%q: answer ends %q", line, last)
		}
	})
}
