//go:build race

package engine_test

// raceDetector is true in a test binary built with -race, where the engine runs many times slower:
// tests that send millions of frames send fewer.
const raceDetector = true
