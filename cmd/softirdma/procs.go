package main

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"

	"github.com/softirdma/softirdma/internal/procgov"
)

// maxProcs bounds -procs: more than any machine serve is meant for, fewer than would make the
// runtime's per-processor structures a cost of their own.
const maxProcs = 1024

// procsFlag is -procs: auto (the governor; the flag's default), or a number of processors, 0 for
// Go's own setting (one per CPU). Its zero value, what serve's options hold unless the flag set
// them, is 0.
type procsFlag struct {
	auto bool
	n    int
}

func (p *procsFlag) String() string {
	if p == nil {
		return "0"
	}
	if p.auto {
		return "auto"
	}
	return strconv.Itoa(p.n)
}

func (p *procsFlag) Set(s string) error {
	if s == "auto" {
		*p = procsFlag{auto: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want auto or a number of CPUs")
	}
	*p = procsFlag{n: n}
	return nil
}

// procsCheck is -procs' check: auto, 0 (Go's own setting) or 1 to maxProcs.
func procsCheck(p procsFlag) flagCheck {
	c := intRange("procs", p.n, 0, maxProcs)
	c.accepted = "auto or " + c.accepted
	return c
}

// setProcs sets how many CPUs serve's goroutines run on at once, unless procs is 0.
func setProcs(procs int) {
	if procs != 0 {
		runtime.GOMAXPROCS(procs)
	}
}

// governProcs applies -procs once serve listens, logs it, and returns what ends it. A number is
// set for good. auto lets procgov set it from how busy serve is: one processor while serve uses
// less than most of a CPU, more while it fills them (never more than Go's own setting). A
// function's path hands work from goroutine to goroutine (the vfio-user connection's, the
// device's clock, the link's reader); with a processor idle each handoff to a parked goroutine
// wakes a thread, which spins for work and sleeps again, CPU that VMs keeping the machine busy
// lose. A serve that streams fills its processor and gets the second one back.
// docs/performance.md has both measured.
func governProcs(ctx context.Context, log *slog.Logger, p procsFlag) (stop func()) {
	if !p.auto {
		setProcs(p.n)
		log.Info("procs", "n", runtime.GOMAXPROCS(0)) // serve -procs N, or Go's own for 0
		return func() {}
	}
	most := runtime.GOMAXPROCS(0)
	stop = procgov.Start(ctx, most, func(from, to int) { log.Debug("procs", "from", from, "to", to) })
	log.Info("procs", "n", "auto", "most", most)
	return stop
}
