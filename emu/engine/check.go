package engine

import (
	"fmt"
	"syscall"
)

// Every verb that returns an error returns EINVAL, naming what was wrong, for a nil object
// where it takes a pointer (as its receiver or an argument), and for a zero object the engine
// did not make (&QP{}): the checks below, one per kind of object. Methods without an error to
// return (accessors such as Num, State, Poll) need an object the engine made.

// nilObject is the error of verb given a nil what.
func nilObject(verb, what string) error {
	return fmt.Errorf("%s: %s is nil: %w", verb, what, syscall.EINVAL)
}

// unmade is the error of verb given a what that maker did not make.
func unmade(verb, what, maker string) error {
	return fmt.Errorf("%s: %s was not made by %s: %w", verb, what, maker, syscall.EINVAL)
}

// checkMade is the check of an object of kind what, which maker makes: EINVAL if it is nil or
// was not made by maker.
func checkMade(verb, what, maker string, isNil, made bool) error {
	switch {
	case isNil:
		return nilObject(verb, what)
	case !made:
		return unmade(verb, what, maker)
	}
	return nil
}

func (d *Device) check(verb string) error {
	return checkMade(verb, "device", "NewDevice", d == nil, d != nil && d.keys != nil)
}

func (pd *PD) check(verb string) error {
	return checkMade(verb, "PD", "AllocPD", pd == nil, pd != nil && pd.dev != nil)
}

// check checks a QP; what names it ("QP", or "QP a" for one of two).
func (qp *QP) check(verb, what string) error {
	return checkMade(verb, what, "CreateQP", qp == nil, qp != nil && qp.dev != nil)
}

func (cq *CQ) check(verb string) error {
	return checkMade(verb, "CQ", "CreateCQ", cq == nil, cq != nil && cq.dev != nil)
}

func (mr *MR) check(verb string) error {
	return checkMade(verb, "MR", "RegMR or its kin", mr == nil, mr != nil && mr.pd != nil)
}

func (mw *MW) check(verb string) error {
	return checkMade(verb, "MW", "AllocMW", mw == nil, mw != nil && mw.pd != nil)
}

func (s *SRQ) check(verb string) error {
	return checkMade(verb, "SRQ", "CreateSRQ", s == nil, s != nil && s.pd != nil)
}

func (ah *AH) check(verb string) error {
	return checkMade(verb, "AH", "CreateAH", ah == nil, ah != nil && ah.pd != nil)
}
