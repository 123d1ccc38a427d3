package faultplan

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softirdma/softirdma/wire/roce"
)

// Syntax is the one-line form of a fault that Parse reads and Spec writes.
const Syntax = `ACTION [KEY=VALUE ...]   (words separated by spaces)
  ACTION   drop, duplicate, corrupt, delay or flap
  from=    the sender: a function's name, or uplink for frames that come in on serve's -link
           (flap: required, the port whose link goes down)
  opcode=  BTH opcodes, comma-separated, as decode prints them (RC_RDMA_READ_RESPONSE_MIDDLE;
           the RC_ may be left out)
  qp=      destination QP number (decimal or 0x hex)
  psn=     PSN
  nth=     fire on the Nth matching frame only
  count=   fire on at most this many matching frames (default: every one)
  after=   the window opens this long after the fault is added (e.g. 500ms; default 0)
  for=     the window lasts this long (default: for ever; flap: required)
  delay=   how long delay holds each frame (delay: required)
  name=    a name for list, not a number (default: its number)`

// maxWindow bounds every duration a fault takes: longer than a test would wait is a mistake.
const maxWindow = time.Hour

// Parse reads a fault in the syntax of Syntax, e.g.
// "drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3". Its window (after=, for=) becomes
// From and Until, counted from whenever the fault is added.
func Parse(spec string) (Fault, error) {
	var p specParse
	words := strings.Fields(spec)
	if len(words) == 0 {
		return p.f, fmt.Errorf("empty fault: %s", firstLine(Syntax))
	}
	if spaced := spaceSeparated(words); !slices.Equal(spaced, words) {
		return p.f, fmt.Errorf("the words of a fault are separated by spaces, not commas: %s", strings.Join(spaced, " "))
	}
	for a := Drop; a <= Flap; a++ {
		if words[0] == a.String() {
			p.f.Action = a
		}
	}
	if p.f.Action == 0 {
		return p.f, fmt.Errorf("%q is not an action: drop, duplicate, corrupt, delay or flap", words[0])
	}
	seen := map[string]bool{}
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok || v == "" {
			return p.f, fmt.Errorf("%q is not KEY=VALUE", w)
		}
		if seen[k] {
			return p.f, fmt.Errorf("%s= given twice", k)
		}
		seen[k] = true
		set, ok := specKeys[k]
		if !ok {
			return p.f, fmt.Errorf("unknown key %q: from, opcode, qp, psn, nth, count, after, for, delay, name", k)
		}
		if err := set(&p, k, v); err != nil {
			return p.f, err
		}
	}
	if err := p.f.checkKeys(p.span); err != nil {
		return p.f, err
	}
	p.f.From = p.after
	if p.span > 0 {
		p.f.Until = p.after + p.span
	}
	return p.f, nil
}

// specParse is a fault being read, with its window's parts.
type specParse struct {
	f           Fault
	after, span time.Duration
}

// specKeys reads each key of a fault's KEY=VALUE words.
var specKeys = map[string]func(p *specParse, k, v string) error{
	"from": func(p *specParse, _, v string) error { p.f.Src = v; return nil },
	"name": func(p *specParse, _, v string) error {
		if _, err := strconv.ParseInt(v, 0, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("name=%s reads as a number, which fault remove takes for a fault's number: give a name with a letter, e.g. name=f%s", v, v)
		}
		p.f.Name = v
		return nil
	},
	"opcode": func(p *specParse, _, v string) error {
		for _, name := range strings.Split(v, ",") {
			op, ok := opcodeByName(name)
			if !ok {
				return fmt.Errorf("opcode %q is not a RoCE opcode (e.g. RC_SEND_ONLY, RDMA_READ_RESPONSE_MIDDLE, ACKNOWLEDGE)", name)
			}
			p.f.Opcodes = append(p.f.Opcodes, op)
		}
		return nil
	},
	"qp": func(p *specParse, _, v string) error {
		n, err := strconv.ParseUint(v, 0, 24)
		if err != nil || n == 0 {
			return fmt.Errorf("qp=%s: a QP number is 1 to 0xffffff", v)
		}
		p.f.DestQP = uint32(n)
		return nil
	},
	"psn": func(p *specParse, _, v string) error {
		n, err := strconv.ParseUint(v, 0, 24)
		if err != nil {
			return fmt.Errorf("psn=%s: a PSN is 0 to 0xffffff", v)
		}
		p.f.MatchPSN, p.f.PSN = true, uint32(n)
		return nil
	},
	"nth":   func(p *specParse, k, v string) error { return parseCount(k, v, &p.f.Nth) },
	"count": func(p *specParse, k, v string) error { return parseCount(k, v, &p.f.Count) },
	"after": func(p *specParse, k, v string) error {
		// 0, the default, is what Syntax documents: the window opens when the fault is added.
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxWindow {
			return fmt.Errorf("%s=%s: a duration from 0 to %v, e.g. 500ms or 2s", k, v, maxWindow)
		}
		p.after = d
		return nil
	},
	"for":   func(p *specParse, k, v string) error { return parseSpan(k, v, &p.span) },
	"delay": func(p *specParse, k, v string) error { return parseSpan(k, v, &p.f.Delay) },
}

// parseCount reads nth= or count=.
func parseCount(k, v string, n *int) error {
	c, err := strconv.Atoi(v)
	if err != nil || c < 1 || c > 1<<30 {
		return fmt.Errorf("%s=%s: a count is 1 to %d", k, v, 1<<30)
	}
	*n = c
	return nil
}

// parseSpan reads for= or delay=: a duration above 0.
func parseSpan(k, v string, d *time.Duration) error {
	t, err := time.ParseDuration(v)
	if err != nil || t <= 0 || t > maxWindow {
		return fmt.Errorf("%s=%s: a duration above 0 and at most %v, e.g. 500ms or 2s", k, v, maxWindow)
	}
	*d = t
	return nil
}

// checkKeys checks the keys a fault was given go together, its window lasting span.
func (f *Fault) checkKeys(span time.Duration) error {
	switch {
	case f.Nth > 0 && f.Count > 0:
		return fmt.Errorf("nth= and count= exclude each other: nth fires once, on that match")
	case f.Action == Delay && f.Delay == 0:
		return fmt.Errorf("delay needs delay=DURATION, e.g. delay=20ms")
	case f.Action != Delay && f.Delay != 0:
		return fmt.Errorf("delay= is for the delay action")
	case f.Action == Flap && (f.Src == "" || span == 0):
		return fmt.Errorf("flap needs from=FUNCTION and for=DURATION: that function's link is down for that long")
	case f.Action == Flap && (len(f.Opcodes) > 0 || f.DestQP != 0 || f.MatchPSN || f.Nth > 0 || f.Count > 0):
		return fmt.Errorf("flap takes only from=, after=, for= and name=: the whole link goes down")
	}
	return nil
}

// Spec writes f in Parse's syntax (its window as after= and for=).
func (f *Fault) Spec() string {
	var b strings.Builder
	b.WriteString(f.Action.String())
	if f.Src != "" {
		fmt.Fprintf(&b, " from=%s", f.Src)
	}
	if len(f.Opcodes) > 0 {
		names := make([]string, len(f.Opcodes))
		for i, op := range f.Opcodes {
			names[i] = op.String()
		}
		fmt.Fprintf(&b, " opcode=%s", strings.Join(names, ","))
	}
	if f.DestQP != 0 {
		fmt.Fprintf(&b, " qp=0x%x", f.DestQP)
	}
	if f.MatchPSN {
		fmt.Fprintf(&b, " psn=%d", f.PSN)
	}
	if f.Nth > 0 {
		fmt.Fprintf(&b, " nth=%d", f.Nth)
	}
	if f.Count > 0 {
		fmt.Fprintf(&b, " count=%d", f.Count)
	}
	if f.From > 0 {
		fmt.Fprintf(&b, " after=%v", f.From)
	}
	if f.Until > 0 {
		fmt.Fprintf(&b, " for=%v", f.Until-f.From)
	}
	if f.Delay > 0 {
		fmt.Fprintf(&b, " delay=%v", f.Delay)
	}
	if f.Name != "" {
		fmt.Fprintf(&b, " name=%s", f.Name)
	}
	return b.String()
}

// opcodeByName finds an opcode by the name decode prints, or that name without its "RC_".
func opcodeByName(name string) (roce.Opcode, bool) {
	name = strings.ToUpper(name)
	for i := range 256 {
		op := roce.Opcode(i)
		if !op.Known() {
			continue
		}
		if n := op.String(); n == name || n == "RC_"+name {
			return op, true
		}
	}
	return 0, false
}

// spaceSeparated is words with every comma that separates KEY=VALUE pairs (or the action from
// the first pair) made a space: "drop,from=a,nth=3" is "drop from=a nth=3". A comma inside a
// value, as between opcode='s opcodes, stays.
func spaceSeparated(words []string) []string {
	var out []string
	for _, w := range words {
		for i, piece := range strings.Split(w, ",") {
			if i == 0 || strings.Contains(piece, "=") {
				out = append(out, piece)
			} else {
				out[len(out)-1] += "," + piece
			}
		}
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
