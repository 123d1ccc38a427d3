//go:build !race

package emu

const raceDetector = false
