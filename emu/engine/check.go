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

func (d *Device) check(verb string) error {
	switch {
	case d == nil:
		return nilObject(verb, "device")
	case d.keys == nil:
		return unmade(verb, "device", "NewDevice")
	}
	return nil
}

func (pd *PD) check(verb string) error {
	switch {
	case pd == nil:
		return nilObject(verb, "PD")
	case pd.dev == nil:
		return unmade(verb, "PD", "AllocPD")
	}
	return nil
}

// check checks a QP; what names it ("QP", or "QP a" for one of two).
func (qp *QP) check(verb, what string) error {
	switch {
	case qp == nil:
		return nilObject(verb, what)
	case qp.dev == nil:
		return unmade(verb, what, "CreateQP")
	}
	return nil
}

func (cq *CQ) check(verb string) error {
	switch {
	case cq == nil:
		return nilObject(verb, "CQ")
	case cq.dev == nil:
		return unmade(verb, "CQ", "CreateCQ")
	}
	return nil
}

func (mr *MR) check(verb string) error {
	switch {
	case mr == nil:
		return nilObject(verb, "MR")
	case mr.pd == nil:
		return unmade(verb, "MR", "RegMR or its kin")
	}
	return nil
}

func (mw *MW) check(verb string) error {
	switch {
	case mw == nil:
		return nilObject(verb, "MW")
	case mw.pd == nil:
		return unmade(verb, "MW", "AllocMW")
	}
	return nil
}

func (s *SRQ) check(verb string) error {
	switch {
	case s == nil:
		return nilObject(verb, "SRQ")
	case s.pd == nil:
		return unmade(verb, "SRQ", "CreateSRQ")
	}
	return nil
}

func (ah *AH) check(verb string) error {
	switch {
	case ah == nil:
		return nilObject(verb, "AH")
	case ah.pd == nil:
		return unmade(verb, "AH", "CreateAH")
	}
	return nil
}
