package emu

// The names of emu/realtime, forwarded.

import "github.com/softirdma/softirdma/emu/realtime"

type (
	// HostConfig sets up a Host. It is realtime.HostConfig; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/realtime.HostConfig
	HostConfig = realtime.HostConfig

	// Host runs a device on a real link, outside the simulator: the wall clock, a goroutine that
	// takes frames off the link, neighbour resolution, and an optional pcap of both directions. It
	// is realtime.Host; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/realtime.Host
	Host = realtime.Host

	// HostStats counts what the host did besides the device's own work. It is realtime.HostStats;
	// its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/realtime.HostStats
	HostStats = realtime.HostStats

	// WallClock is real time for devices outside the simulator. It is realtime.WallClock; its
	// methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/realtime.WallClock
	WallClock = realtime.WallClock
)

func NewHost(cfg HostConfig) (*Host, error) { return realtime.NewHost(cfg) }

func NewWallClock() *WallClock { return realtime.NewWallClock() }
