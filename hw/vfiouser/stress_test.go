package vfiouser

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/softirdma/softirdma/internal/sockguard"
)

// Engine goroutines trigger interrupts while the client keeps reassigning, deassigning and
// disabling the eventfds: no data race (run with -race), no crash, and signals keep arriving.
func TestTriggerWhileClientReassigns(t *testing.T) {
	srv := newServer(t, newFakeDev(t))
	c, _ := serve(t, srv)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := uint32(g); !stop.Load(); v++ {
				srv.Trigger(PCIMSIXIRQ, v%4)
			}
		}()
	}
	var total uint64
	for round := range 200 {
		fds := []int{eventfd(t), eventfd(t), eventfd(t), eventfd(t)}
		if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, fds); err != nil {
			t.Fatal(err)
		}
		switch round % 3 {
		case 0:
			err := c.SetIRQEventfds(PCIMSIXIRQ, 0, []int{-1, -1, -1, -1})
			if err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := c.SetIRQs(IRQDataNone|IRQActionTrig, PCIMSIXIRQ, 0, 0, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, fd := range fds {
			total += readEventfd(t, fd)
		}
		sockguard.CloseFDs(fds)
	}
	stop.Store(true)
	wg.Wait()
	if total == 0 {
		t.Fatal("no trigger reached any eventfd")
	}
}
