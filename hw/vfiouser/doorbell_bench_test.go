package vfiouser

import (
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// doorbellDev is a device whose BAR 0 offset 0 is a doorbell: every write is handed to rang.
type doorbellDev struct {
	*fakeDev
	rang chan uint32
}

func (d doorbellDev) RegionWrite(index uint32, off uint64, data []byte) error {
	if index == 0 && off == 0 && len(data) == 4 {
		d.rang <- uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		return nil
	}
	return d.fakeDev.RegionWrite(index, off, data)
}

// BenchmarkDoorbell is where a doorbell's time goes, from the driver's write to the device
// seeing it: as a posted REGION_WRITE on the vfio-user socket (what the function uses: BAR 2 is
// not mmappable), and as a store into a page shared by mmap (a sparse-mmapped BAR page: the
// guest's write never leaves the guest) that the device finds by polling it, spinning on a core
// of its own.
func BenchmarkDoorbell(b *testing.B) {
	b.Run("socket-posted-write", func(b *testing.B) {
		dev := doorbellDev{fakeDev: newFakeDev(b), rang: make(chan uint32, 1)}
		c, _ := serve(b, newServer(b, dev))
		v := make([]byte, 4)
		n := uint32(0)
		for b.Loop() {
			n++
			v[0], v[1], v[2], v[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
			if err := c.RegionWrite(0, 0, v, true); err != nil {
				b.Fatal(err)
			}
			if got := <-dev.rang; got != n {
				b.Fatalf("doorbell %d, want %d", got, n)
			}
		}
	})
	b.Run("mmap-polled-page", func(b *testing.B) {
		fd, err := unix.MemfdCreate("doorbells", unix.MFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, 4096); err != nil {
			b.Fatal(err)
		}
		// Two mappings of the page, as the device process and QEMU (the guest) each have one.
		mapping := func() []byte {
			m, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { unix.Munmap(m) })
			return m
		}
		guest, device := mapping(), mapping()
		guestBell := (*atomic.Uint32)(unsafe.Pointer(&guest[0]))
		deviceBell := (*atomic.Uint32)(unsafe.Pointer(&device[0]))
		seen := make(chan uint32, 1)
		stop := make(chan struct{})
		go func() { // the device's poller
			last := uint32(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if v := deviceBell.Load(); v != last {
					last = v
					seen <- v
				}
				runtime.Gosched()
			}
		}()
		defer close(stop)
		n := uint32(0)
		for b.Loop() {
			n++
			guestBell.Store(n)
			if got := <-seen; got != n {
				b.Fatalf("doorbell %d, want %d", got, n)
			}
		}
	})
}
