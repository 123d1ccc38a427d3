package emu

// The names of emu/realtime, forwarded.

import "github.com/softirdma/softirdma/emu/realtime"

type (
	HostConfig = realtime.HostConfig
	Host       = realtime.Host
	HostStats  = realtime.HostStats
	WallClock  = realtime.WallClock
)

func NewHost(cfg HostConfig) (*Host, error) { return realtime.NewHost(cfg) }

func NewWallClock() *WallClock { return realtime.NewWallClock() }
