package emu

// The names of emu/realtime, forwarded.

import "github.com/softirdma/softirdma/emu/realtime"

type (
	HostConfig = realtime.HostConfig
	Host       = realtime.Host
	HostStats  = realtime.HostStats
	WallClock  = realtime.WallClock
)

func NewHost(a0 HostConfig) (*Host, error) { return realtime.NewHost(a0) }

func NewWallClock() *WallClock { return realtime.NewWallClock() }
