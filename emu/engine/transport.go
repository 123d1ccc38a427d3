package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/wire/roce"
)

// transport is what a QP's type decides: the BTH opcodes its packets use, its state machine,
// the work requests it sends, where its peers are, and its own steps on the send and the receive
// side. Everything else about a QP (queues, segmentation, gathering and placing data, keys,
// completions) is shared. Each transport is defined in its own file (rc.go, uc.go, ud.go); the
// transports table below is the one place that names them all.
type transport struct {
	name string
	// wire is the opcode table's transport: which opcodes requests are built from, and which
	// arriving packets the QP takes.
	wire roce.Transport
	// transitions is the verbs state machine: for each allowed transition the attributes it
	// requires and those it may also set. Moves to RESET and ERR are allowed from every state.
	transitions map[[2]QPState][2]AttrMask
	// sends is the set of work requests the QP posts; others are EINVAL at post.
	sends wrSet
	// connected: the QP has one peer, set by the AV and destination QPN at RTR, and takes
	// packets from it alone. A datagram QP names its peer in each work request and takes
	// packets from anyone.
	connected bool
	// acked: a message waits for the responder's acknowledgement (and is sent again without
	// one); otherwise it completes when its last packet leaves.
	acked bool
	// request is the responder: a request packet for the QP. response is the completer:
	// an acknowledgement or response for it; nil for a transport nothing answers.
	request, response func(qp *QP, f *roce.Frame)
	// header addresses a datagram transport's request packet: it adds what the packets carry
	// beyond what segmentation gives them and returns the route to send it on. A connected
	// transport's packets go to the QP's peer on the path set at RTR. (The header goes by value:
	// a pointer through this indirect call would put every packet's header on the heap.)
	header func(qp *QP, w *sendWQE, h roce.Header) (roce.Header, route)
	// single: a message is one packet. One longer than the path MTU is not sent and completes
	// successfully, as IBTA C10-93.1.1 has it for UD and rxe does.
	single bool
	// postCheck refuses a work request the transport cannot send, at post; nil checks
	// nothing beyond sends. (By value: a pointer through the indirect call would put every
	// posted request on the heap.)
	postCheck func(qp *QP, wr SendWR) error
	// modified runs after a Modify to next that succeeded, with the QP locked.
	modified func(qp *QP, cur, next QPState)
}

// route is where a request packet goes: the frame builder of its path, and whether the path
// ends at the device itself (the packet then loops back without touching the link).
type route struct {
	b     *roce.Builder
	local bool
}

// transports are the QP types a device creates, by QPType.
var transports = [...]*transport{
	QPTypeGSI: &gsiTransport,
	QPTypeRC:  &rcTransport,
	QPTypeUC:  &ucTransport,
	QPTypeUD:  &udTransport,
}

// transportOf is the transport of QP type t, or nil.
func transportOf(t QPType) *transport {
	if int(t) < len(transports) {
		return transports[t]
	}
	return nil
}

// wrSet is a set of work request opcodes (all below 64).
type wrSet uint64

func wrs(ops ...WROpcode) wrSet {
	var s wrSet
	for _, op := range ops {
		s |= 1 << op
	}
	return s
}

func (s wrSet) has(op WROpcode) bool { return op < 64 && s&(1<<op) != 0 }

// requestOpcode is the opcode of a SEND or WRITE packet of transport t by its place in the
// message.
func requestOpcode(t roce.Transport, op WROpcode, first, last bool) roce.Opcode {
	return requestOpcodes[t][op][classOf(first, last)]
}

// classOf is the class of a packet that is or is not the first and the last of its message.
func classOf(first, last bool) roce.Class {
	switch {
	case first && last:
		return roce.Only
	case first:
		return roce.First
	case last:
		return roce.Last
	}
	return roce.Middle
}

// requestOpcodes is requestOpcode's table, by transport, WR opcode and class, taken from wire's
// opcode table once. Immediate data and invalidation ride on the last packet only, so FIRST and
// MIDDLE are the plain SEND or WRITE ones. The entries of what a transport lacks are never read:
// its sends refuse those work requests at post.
var requestOpcodes = func() (t [roce.UD + 1][WRSendWithInv + 1][roce.Only + 1]roce.Opcode) {
	const key = roce.FlagSend | roce.FlagWrite | roce.FlagImm | roce.FlagInv
	for _, tr := range []roce.Transport{roce.RC, roce.UC, roce.UD} {
		for wr, want := range map[WROpcode]roce.Flags{
			WRRDMAWrite:        roce.FlagWrite,
			WRRDMAWriteWithImm: roce.FlagWrite | roce.FlagImm,
			WRSend:             roce.FlagSend,
			WRSendWithImm:      roce.FlagSend | roce.FlagImm,
			WRSendWithInv:      roce.FlagSend | roce.FlagInv,
		} {
			for c := roce.First; c <= roce.Only; c++ {
				w := want
				if c == roce.First || c == roce.Middle {
					w &^= roce.FlagImm | roce.FlagInv
				}
				if op, ok := findOpcode(tr, c, key, w); ok {
					t[tr][wr][c] = op
				}
			}
		}
	}
	return t
}()

// readResponseOpcodes is the READ response opcode by class.
var readResponseOpcodes = func() (t [roce.Only + 1]roce.Opcode) {
	for c := roce.First; c <= roce.Only; c++ {
		op, ok := findOpcode(roce.RC, c, roce.FlagReadResponse, roce.FlagReadResponse)
		if !ok {
			panic(fmt.Sprintf("engine: no RC READ response of class %s", c))
		}
		t[c] = op
	}
	return t
}()

// findOpcode is the one opcode of transport t and class c whose flags in key are want.
func findOpcode(t roce.Transport, c roce.Class, key, want roce.Flags) (roce.Opcode, bool) {
	var found []roce.Opcode
	for _, op := range roce.Opcodes() {
		if info := op.Info(); info.Transport == t && info.Class == c && info.Flags&key == want {
			found = append(found, op)
		}
	}
	switch len(found) {
	case 0:
		return 0, false
	case 1:
		return found[0], true
	}
	panic(fmt.Sprintf("engine: %s opcodes of class %s with flags 0x%x of 0x%x: %v", t, c, want, key, found))
}
