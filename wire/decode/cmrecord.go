package decode

import (
	"fmt"
	"strings"

	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// CM is what a connection manager MAD says: the message, the communication IDs, and per message
// the service (with rdma_cm's port space and port), QP numbers, starting PSNs, rdma_cm's addresses,
// a REJ's reason or a SIDR_REP's status. Fields a message does not carry are absent.
type CM struct {
	Msg          string  `json:"msg"`
	LocalCommID  *uint32 `json:"local_comm_id,omitempty"`
	RemoteCommID *uint32 `json:"remote_comm_id,omitempty"`
	ServiceID    *Hex64  `json:"service_id,omitempty"`
	PortSpace    string  `json:"port_space,omitempty"`
	Port         *uint16 `json:"port,omitempty"`
	QPN          *uint32 `json:"qpn,omitempty"`
	StartingPSN  *uint32 `json:"starting_psn,omitempty"`
	QKey         *uint32 `json:"qkey,omitempty"`
	// Src and Dst are rdma_cm's header's addresses in a REQ or SIDR_REQ, SrcPort its port.
	Src     string  `json:"src,omitempty"`
	Dst     string  `json:"dst,omitempty"`
	SrcPort *uint16 `json:"src_port,omitempty"`
	Reason  string  `json:"reason,omitempty"`
	Status  string  `json:"status,omitempty"`
}

// cmOf reads the CM message in a CM MAD's data; nil when it is not one this decoder knows.
func cmOf(h mad.Header, data []byte) *CM {
	if h.MgmtClass != mad.ClassCM || len(data) < mad.HeaderLen+cm.DataLen {
		return nil
	}
	b := data[mad.HeaderLen : mad.HeaderLen+cm.DataLen]
	u32 := func(v uint32) *uint32 { return &v }
	c := &CM{Msg: h.AttrName()}
	service := func(id uint64) {
		s := Hex64(id)
		c.ServiceID = &s
		if ps, port, ok := cm.SplitServiceID(id); ok {
			c.PortSpace, c.Port = ps.String(), &port
		}
	}
	header := func(p []byte) {
		if hd, err := cm.ParseHeader(p); err == nil {
			c.Src, c.Dst, c.SrcPort = hd.Src.String(), hd.Dst.String(), &hd.SrcPort
		}
	}
	switch h.AttrID {
	case cm.AttrREQ:
		m, _ := cm.ParseREQ(b)
		c.LocalCommID, c.QPN, c.StartingPSN = u32(m.LocalCommID), u32(m.LocalQPN), u32(m.StartingPSN)
		service(m.ServiceID)
		header(m.Private[:])
	case cm.AttrREP:
		m, _ := cm.ParseREP(b)
		c.LocalCommID, c.RemoteCommID, c.QPN, c.StartingPSN = u32(m.LocalCommID), u32(m.RemoteCommID), u32(m.LocalQPN), u32(m.StartingPSN)
	case cm.AttrREJ:
		m, _ := cm.ParseREJ(b)
		c.LocalCommID, c.RemoteCommID, c.Reason = u32(m.LocalCommID), u32(m.RemoteCommID), m.Reason.String()
	case cm.AttrMRA:
		m, _ := cm.ParseMRA(b)
		c.LocalCommID, c.RemoteCommID = u32(m.LocalCommID), u32(m.RemoteCommID)
	case cm.AttrRTU, cm.AttrDREP:
		m, _ := cm.ParseRTU(b)
		c.LocalCommID, c.RemoteCommID = u32(m.LocalCommID), u32(m.RemoteCommID)
	case cm.AttrDREQ:
		m, _ := cm.ParseDREQ(b)
		c.LocalCommID, c.RemoteCommID, c.QPN = u32(m.LocalCommID), u32(m.RemoteCommID), u32(m.RemoteQPN)
	case cm.AttrSIDRREQ:
		m, _ := cm.ParseSIDRREQ(b)
		c.LocalCommID = u32(m.RequestID)
		service(m.ServiceID)
		header(m.Private[:])
	case cm.AttrSIDRREP:
		m, _ := cm.ParseSIDRREP(b)
		c.LocalCommID, c.QPN, c.QKey, c.Status = u32(m.RequestID), u32(m.QPN), u32(m.QKey), m.Status.String()
		service(m.ServiceID)
	default:
		return nil
	}
	return c
}

// text renders the CM fields for the human output.
func (c *CM) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, " cm=%s", c.Msg)
	if c.LocalCommID != nil {
		fmt.Fprintf(&b, " comm=%s", hex32(*c.LocalCommID))
	}
	if c.RemoteCommID != nil {
		fmt.Fprintf(&b, " remote_comm=%s", hex32(*c.RemoteCommID))
	}
	if c.ServiceID != nil {
		fmt.Fprintf(&b, " service=%s", *c.ServiceID)
		if c.Port != nil {
			fmt.Fprintf(&b, "(%s:%d)", c.PortSpace, *c.Port)
		}
	}
	if c.QPN != nil {
		fmt.Fprintf(&b, " cm_qpn=%s", hex24(*c.QPN))
	}
	if c.StartingPSN != nil {
		fmt.Fprintf(&b, " start_psn=%d", *c.StartingPSN)
	}
	if c.QKey != nil {
		fmt.Fprintf(&b, " cm_qkey=%s", hex32(*c.QKey))
	}
	if c.Src != "" {
		fmt.Fprintf(&b, " rdma_cm=%s:%d->%s", c.Src, *c.SrcPort, c.Dst)
	}
	if c.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", c.Reason)
	}
	if c.Status != "" {
		fmt.Fprintf(&b, " status=%s", c.Status)
	}
	return b.String()
}
