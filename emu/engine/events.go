package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/softirdma/softirdma/internal/names"
)

// EventKind says what an Event records.
type EventKind uint8

const (
	EvQPState  EventKind = iota + 1 // a QP changed state
	EvPost                          // a work request was posted
	EvSend                          // a packet left
	EvRecv                          // a packet arrived and was accepted
	EvDrop                          // a packet arrived and was dropped (malformed, bad ICRC, wrong QP, out of sequence)
	EvNAK                           // a NAK was sent or received
	EvRetry                         // the requester went back to resend (timeout, NAK, RNR)
	EvComplete                      // a completion was queued
	EvAccess                        // an access check failed
	EvKey                           // a key changed: bind, invalidation, registration
	EvFault                         // a simulated fault fired
	EvWarning                       // something legal but almost certainly a bug
	EvAsync                         // an asynchronous event was raised (OnAsyncEvent)
	EvAddress                       // the device's addresses changed (SetAddresses)
)

var eventKindNames = [...]string{"", "qp-state", "post", "send", "recv", "drop", "nak", "retry",
	"complete", "access", "key", "fault", "warning", "async", "address"}

func (k EventKind) String() string { return names.In(eventKindNames[:], k, "event-%d") }

// Event is one thing that happened in the engine, with what a person debugging it needs: when,
// where, and for failures which check failed with which key, range, PSN or state.
type Event struct {
	T      time.Duration
	Device string
	QP     uint32
	Kind   EventKind
	PSN    uint32
	WRID   uint64
	Status WCStatus
	Key    uint32
	Msg    string
	Err    error
}

func (e Event) String() string {
	s := fmt.Sprintf("t=%-12v %-6s", e.T, e.Device)
	if e.QP != 0 {
		s += fmt.Sprintf(" qp=0x%06x", e.QP)
	}
	s += fmt.Sprintf(" %-8s %s", e.Kind, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// EventSink receives the engine's events. It is called with no lock of the engine held, one
// event at a time in the order they happened, by whichever goroutine carries out the device's
// work; it must not call back into the device.
type EventSink func(Event)

// SlogSink sends events to a slog.Logger: failures at Warn, the rest at Debug.
func SlogSink(l *slog.Logger) EventSink {
	return func(e Event) {
		level := slog.LevelDebug
		if e.Err != nil || e.Kind == EvWarning || e.Kind == EvFault || (e.Kind == EvComplete && e.Status != WCSuccess) {
			level = slog.LevelWarn
		}
		attrs := []any{"t", e.T, "dev", e.Device, "kind", e.Kind.String()}
		if e.QP != 0 {
			attrs = append(attrs, "qp", fmt.Sprintf("0x%06x", e.QP))
		}
		if e.Err != nil {
			attrs = append(attrs, "err", e.Err.Error())
		}
		l.Log(context.Background(), level, e.Msg, attrs...)
	}
}
