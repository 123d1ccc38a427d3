//go:build !lockcheck

package engine

import "sync"

// mutex is a sync.Mutex of the lock kind R; in this build it is nothing more.
type mutex[R ranked] struct{ sync.Mutex }

// rwMutex is a sync.RWMutex of the lock kind R; in this build it is nothing more.
type rwMutex[R ranked] struct{ sync.RWMutex }

// lockNoneHeld checks, with -tags lockcheck, that the calling goroutine holds no lock of the
// engine where it is about to wait or call out.
func lockNoneHeld(where string) {}

// lockAtMostQPHeld checks, with -tags lockcheck, that the calling goroutine holds no lock of
// the engine but QP locks where it is about to wait for other QPs.
func lockAtMostQPHeld(where string) {}
