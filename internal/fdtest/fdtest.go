// Package fdtest makes the file descriptors tests hand a vfio-user server: a memfd standing for
// guest RAM and eventfds standing for interrupts, failing the test on any error.
package fdtest

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// Memfd returns a memfd of size bytes, filled by fill when it is not nil.
func Memfd(t testing.TB, size int, fill func([]byte)) int {
	t.Helper()
	fd, err := unix.MemfdCreate("guest", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		b := make([]byte, size)
		fill(b)
		if _, err := unix.Pwrite(fd, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// Eventfd returns a non-blocking eventfd.
func Eventfd(t testing.TB) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// ReadEventfd returns the eventfd's counter (0 when nothing was signalled) and resets it.
func ReadEventfd(t testing.TB, fd int) uint64 {
	t.Helper()
	var b [8]byte
	_, err := unix.Read(fd, b[:])
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}
