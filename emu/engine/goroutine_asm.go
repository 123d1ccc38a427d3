//go:build lockcheck && (amd64 || arm64)

package engine

// goroutineID names the calling goroutine by the address of its runtime descriptor, which
// stays put while the goroutine lives: a few instructions, where runtime.Stack's number
// (goroutine_stack.go) costs a traceback on every lock. A goroutine never ends holding an
// engine lock, so a descriptor used again by a later goroutine starts with nothing held.
func goroutineID() uint64

// The assembly (goroutine_amd64.s, goroutine_arm64.s) reads the descriptor's address from where
// the runtime keeps it for the running goroutine.
