package engine

// ConnectOptions are the attributes ConnectRC gives both ends of an RC connection. Zero values
// take the defaults in brackets.
type ConnectOptions struct {
	MTU         MTU    // path MTU [MTU1024, as rxe on a 1500-byte Ethernet]
	Timeout     uint8  // local ACK timeout code [14: 67 ms]
	RetryCnt    uint8  // [7]
	RNRRetry    uint8  // [7: forever]
	MinRNRTimer uint8  // [12: 0.64 ms]
	MaxRdAtomic uint8  // both directions [16]
	Access      Access // the QPs' remote rights [REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|FLUSH_GLOBAL|FLUSH_PERSISTENT]
	PSNA, PSNB  uint32 // the first PSN each side sends [0]
	// NoDefaults keeps every zero above as zero (timeout 0 = no timer, retry_cnt 0 ...).
	NoDefaults bool
}

// ConnectRC takes two RC QPs in RESET through INIT and RTR to RTS, each pointing at the other,
// as ibv_rc_pingpong does after its TCP exchange.
//
// ConnectRC(qp, qp, o) connects one QP to itself, as rxe allows (its AV names its own device,
// its destination QPN is its own; loopback carries the frames): the QP goes through each state
// once. What it sends it also receives, so its receive PSN is its send PSN, o.PSNA; o.PSNB is
// not used.
func ConnectRC(a, b *QP, o ConnectOptions) error {
	if err := a.check("connect_rc", "QP a"); err != nil {
		return err
	}
	if err := b.check("connect_rc", "QP b"); err != nil {
		return err
	}
	if !o.NoDefaults {
		if o.MTU == 0 {
			o.MTU = MTU1024
		}
		if o.Timeout == 0 {
			o.Timeout = DefaultTimeout
		}
		if o.RetryCnt == 0 {
			o.RetryCnt = DefaultRetryCnt
		}
		if o.RNRRetry == 0 {
			o.RNRRetry = DefaultRNRRetry
		}
		if o.MinRNRTimer == 0 {
			o.MinRNRTimer = DefaultMinRNRTimer
		}
		if o.MaxRdAtomic == 0 {
			o.MaxRdAtomic = 16
		}
		if o.Access == 0 {
			o.Access = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal | AccessFlushPersistent
		}
	}
	ends := []struct {
		qp, peer     *QP
		sendPSN, rcv uint32
	}{{a, b, o.PSNA, o.PSNB}, {b, a, o.PSNB, o.PSNA}}
	if a == b {
		// Walking the one QP through the states twice would fail at the second RESET->INIT;
		// its packets come back to it, so it expects the PSNs it sends.
		ends = ends[:1]
		ends[0].rcv = o.PSNA
	}
	for _, e := range ends {
		if err := e.qp.Modify(QPAttr{State: QPSInit, Port: 1, AccessFlags: o.Access},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			return err
		}
	}
	for _, e := range ends {
		attr := QPAttr{State: QPSRTR, AH: AHAttr{DGID: e.peer.dev.IP(), HopLimit: 64}, PathMTU: o.MTU,
			DestQPN: e.peer.qpn, RQPSN: e.rcv, MaxDestRdAtomic: o.MaxRdAtomic, MinRNRTimer: o.MinRNRTimer}
		if err := e.qp.Modify(attr, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
			return err
		}
	}
	for _, e := range ends {
		attr := QPAttr{State: QPSRTS, SQPSN: e.sendPSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic}
		if err := e.qp.Modify(attr, AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic); err != nil {
			return err
		}
	}
	return nil
}
