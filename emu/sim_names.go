package emu

// The names of emu/sim, forwarded.

import "github.com/softirdma/softirdma/emu/sim"

type (
	Sim         = sim.Sim
	LinkConfig  = sim.LinkConfig
	FaultAction = sim.FaultAction
	Fault       = sim.Fault
	Fabric      = sim.Fabric
	LinkStats   = sim.LinkStats
)

const (
	FaultDrop      = sim.FaultDrop
	FaultDuplicate = sim.FaultDuplicate
	FaultCorrupt   = sim.FaultCorrupt
	FaultDelay     = sim.FaultDelay
)

func NewSim() *Sim { return sim.NewSim() }

func NewFabric(a0 *Sim, seed uint64) *Fabric { return sim.NewFabric(a0, seed) }
