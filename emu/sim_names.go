package emu

// The names of emu/sim, forwarded.

import "github.com/softirdma/softirdma/emu/sim"

type (
	// Sim is the simulator's clock and event loop: a virtual clock that jumps from event to event,
	// so an ACK timeout of seconds costs no wall-clock time. It is sim.Sim; its methods are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/sim.Sim
	Sim = sim.Sim

	// LinkConfig is a simulated link's behaviour: every frame a device sends through it takes
	// Latency to arrive and meets each fault with its probability. It is sim.LinkConfig; its fields
	// and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/sim.LinkConfig
	LinkConfig = sim.LinkConfig

	// FaultAction is what a targeted fault does to the frames it matches. It is sim.FaultAction,
	// which is faultplan.Action; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/wire/faultplan.Action
	FaultAction = sim.FaultAction

	// Fault is a targeted fault: it matches frames by sender, opcode, destination QP and PSN, and
	// fires on the Nth match, or on every match (at most Count times), within a time window. It is
	// sim.Fault, which is faultplan.Fault; its fields and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/wire/faultplan.Fault
	Fault = sim.Fault

	// Fabric is the simulator's network: a switch joining any number of devices, each through a link
	// with its own faults, all driven by one Sim and one seeded random source. It is sim.Fabric; its
	// methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/sim.Fabric
	Fabric = sim.Fabric

	// LinkStats counts what crossed one device's simulated link. It is sim.LinkStats; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/sim.LinkStats
	LinkStats = sim.LinkStats
)

const (
	FaultDrop      = sim.FaultDrop
	FaultDuplicate = sim.FaultDuplicate
	FaultCorrupt   = sim.FaultCorrupt
	FaultDelay     = sim.FaultDelay
)

func NewSim() *Sim { return sim.NewSim() }

func NewFabric(a0 *Sim, seed uint64) *Fabric { return sim.NewFabric(a0, seed) }
