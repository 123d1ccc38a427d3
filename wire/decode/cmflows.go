package decode

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// CMExchange is one connection manager exchange: a REQ and what answered it, or a SIDR_REQ and
// its SIDR_REP, keyed by the asking side's address and communication (or request) ID. Its QPNs
// name the RC connection it set up (the conn lines of -flows) or the UD QP it found, and Outcome
// says how far it got.
type CMExchange struct {
	// SIDR marks a UD service's resolution: no active QPN, the passive QPN and Q_Key from the
	// SIDR_REP.
	SIDR      bool       `json:"sidr,omitempty"`
	Active    netip.Addr `json:"active"`
	ActiveQPN uint32     `json:"active_qpn"`
	ActiveID  uint32     `json:"active_comm_id"`
	Passive   netip.Addr `json:"passive"`
	// PassiveQPN and PassiveID come with the REP.
	PassiveQPN uint32 `json:"passive_qpn,omitempty"`
	PassiveID  uint32 `json:"passive_comm_id,omitempty"`
	QKey       uint32 `json:"qkey,omitempty"`
	ServiceID  Hex64  `json:"service_id"`
	PortSpace  string `json:"port_space,omitempty"`
	Port       uint16 `json:"port,omitempty"`
	// Messages are the exchange's messages in order ("REQ", "REP", "RTU", "REJ", "DREQ",
	// "DREP", "MRA", "SIDR_REQ", "SIDR_REP"), resends included.
	Messages []string `json:"messages"`
	// Outcome: "established" (an RTU), "no RTU" (a REP and no RTU), "no REP" (a REQ alone),
	// "rejected: REASON", and "disconnected" once a DREQ was answered; for SIDR "resolved",
	// "refused: STATUS" or "no SIDR_REP".
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`

	rtu, rep, dreq, drep bool
}

type cmKey struct {
	active netip.Addr
	id     uint32
}

// cmExchanges accumulates the CM exchanges of a Flows.
type cmExchanges struct {
	byActive map[cmKey]*CMExchange
	order    []*CMExchange
}

// add accounts one CM MAD from src to dst.
func (c *cmExchanges) add(src, dst netip.Addr, h mad.Header, data []byte) {
	if h.MgmtClass != mad.ClassCM || len(data) < mad.HeaderLen+cm.DataLen {
		return
	}
	if c.byActive == nil {
		c.byActive = map[cmKey]*CMExchange{}
	}
	if x := c.exchangeOf(src, dst, h.AttrID, data[mad.HeaderLen:mad.HeaderLen+cm.DataLen]); x != nil {
		x.Messages = append(x.Messages, h.AttrName())
	}
}

// exchangeOf finds (a REQ or SIDR_REQ opens) the exchange a CM message of attribute attr from src
// to dst belongs to, and notes what the message settles. The passive side's messages name the
// active side's ID as their remote one, the active side's as their local one.
func (c *cmExchanges) exchangeOf(src, dst netip.Addr, attr uint16, b []byte) *CMExchange {
	switch attr {
	case cm.AttrREQ:
		q, _ := cm.ParseREQ(b)
		return c.open(src, q.LocalCommID, CMExchange{Active: src, ActiveQPN: q.LocalQPN, ActiveID: q.LocalCommID, Passive: dst}, q.ServiceID)
	case cm.AttrSIDRREQ:
		q, _ := cm.ParseSIDRREQ(b)
		return c.open(src, q.RequestID, CMExchange{SIDR: true, Active: src, ActiveID: q.RequestID, Passive: dst}, q.ServiceID)
	case cm.AttrSIDRREP:
		r, _ := cm.ParseSIDRREP(b)
		x := c.byActive[cmKey{dst, r.RequestID}]
		if x != nil && x.SIDR {
			x.rep = true
			if r.Status == cm.SIDRSuccess {
				x.PassiveQPN, x.QKey = r.QPN, r.QKey
			} else {
				x.Reason = r.Status.String()
			}
		}
		return x
	case cm.AttrREP:
		r, _ := cm.ParseREP(b)
		x := c.byActive[cmKey{dst, r.RemoteCommID}]
		if x != nil {
			x.PassiveQPN, x.PassiveID, x.rep = r.LocalQPN, r.LocalCommID, true
		}
		return x
	case cm.AttrREJ:
		r, _ := cm.ParseREJ(b)
		// From the passive side it names the REQ's ID as remote; from the active side (a REP
		// refused) as local.
		x := c.either(dst, r.RemoteCommID, src, r.LocalCommID)
		if x != nil {
			x.Reason = r.Reason.String()
		}
		return x
	case cm.AttrRTU, cm.AttrDREQ, cm.AttrDREP, cm.AttrMRA:
		p, _ := cm.ParseRTU(b) // the same two IDs lead each of these
		x := c.either(src, p.LocalCommID, dst, p.RemoteCommID)
		if x != nil {
			x.rtu = x.rtu || attr == cm.AttrRTU
			x.dreq = x.dreq || attr == cm.AttrDREQ
			x.drep = x.drep || attr == cm.AttrDREP
		}
		return x
	}
	return nil
}

// open is the exchange whose request active sent with ID id, made from x (its service from
// serviceID) if this is the first time the request is seen.
func (c *cmExchanges) open(active netip.Addr, id uint32, x CMExchange, serviceID uint64) *CMExchange {
	if old := c.byActive[cmKey{active, id}]; old != nil {
		return old
	}
	x.ServiceID = Hex64(serviceID)
	if ps, port, ok := cm.SplitServiceID(serviceID); ok {
		x.PortSpace, x.Port = ps.String(), port
	}
	c.byActive[cmKey{active, id}] = &x
	c.order = append(c.order, &x)
	return &x
}

// either is the exchange of active a's ID idA, or else of active b's ID idB.
func (c *cmExchanges) either(a netip.Addr, idA uint32, b netip.Addr, idB uint32) *CMExchange {
	if x := c.byActive[cmKey{a, idA}]; x != nil {
		return x
	}
	return c.byActive[cmKey{b, idB}]
}

// exchanges returns the exchanges in order of their REQs, their outcomes settled.
func (c *cmExchanges) exchanges() []*CMExchange {
	for _, x := range c.order {
		switch {
		case x.SIDR && x.Reason != "":
			x.Outcome = "refused: " + x.Reason
		case x.SIDR && x.rep:
			x.Outcome = "resolved"
		case x.SIDR:
			x.Outcome = "no SIDR_REP"
		case x.Reason != "":
			x.Outcome = "rejected: " + x.Reason
		case x.rtu && x.dreq && x.drep:
			x.Outcome = "disconnected"
		case x.rtu:
			x.Outcome = "established"
		case x.rep:
			x.Outcome = "no RTU"
		default:
			x.Outcome = "no REP"
		}
	}
	return c.order
}

// CMExchanges returns the connection manager exchanges in order of their REQs.
func (fl *Flows) CMExchanges() []*CMExchange { return fl.unrel.cms.exchanges() }

// Line renders an exchange for the human output.
func (x *CMExchange) Line() string {
	svc := x.ServiceID.String()
	if x.PortSpace != "" {
		svc = fmt.Sprintf("%s:%d", x.PortSpace, x.Port)
	}
	passive := "qp=?"
	if x.rep {
		passive = "qp=" + hex24(x.PassiveQPN)
	}
	if x.SIDR {
		if x.Reason != "" {
			passive = "qp=?" // refused: no QP
		}
		qkey := ""
		if x.QKey != 0 {
			qkey = fmt.Sprintf(" qkey=0x%08x", x.QKey)
		}
		return fmt.Sprintf("sidr %s -> %s %s%s service=%s: %s (%s)", x.Active, x.Passive, passive, qkey, svc,
			strings.Join(x.Messages, " "), x.Outcome)
	}
	return fmt.Sprintf("cm %s qp=%s -> %s %s service=%s: %s (%s)", x.Active, hex24(x.ActiveQPN), x.Passive, passive, svc,
		strings.Join(x.Messages, " "), x.Outcome)
}
