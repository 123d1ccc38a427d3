package ucontext

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Event sizes: struct ib_uverbs_comp_event_desc and ib_uverbs_async_event_desc.
const (
	compEventSize  = 8
	asyncEventSize = 16
)

// channel is an event file: a completion channel or the async event file. The program holds one
// end of a socket pair, which it reads one event a read() from, polls and sets O_NONBLOCK on
// as it would the kernel's; the context writes events into the other end, never blocking (a
// program that reads no events loses the ones past its socket's buffer; send says so).
type channel struct {
	mu   sync.Mutex
	fd   int // the context's end; -1 once closed
	peer int // a copy of the program's end, to take back events of an object destroyed
	size int
	ino  uint64 // the inode of the program's end, by which a command names the channel
}

func newChannel(size int) (*channel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("event channel: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[1], &st); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("event channel: %w", err)
	}
	_ = unix.Shutdown(fds[1], unix.SHUT_WR)
	peer, err := unix.FcntlInt(uintptr(fds[1]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("event channel: %w", err)
	}
	return &channel{fd: fds[0], peer: peer, size: size, ino: st.Ino}, os.NewFile(uintptr(fds[1]), "softirdma-event"), nil
}

// send queues one event; false if it was lost.
func (ch *channel) send(ev []byte) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.fd < 0 {
		return false
	}
	return unix.Sendmsg(ch.fd, ev, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL) == nil
}

func (ch *channel) close() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.fd >= 0 {
		unix.Close(ch.fd)
		unix.Close(ch.peer)
		ch.fd = -1
	}
}

// withdraw takes back the queued events that match, as the kernel drops a destroyed object's
// events from its event file, and returns how many: the others go back in their order. A
// program reading at the same time may see those after an event queued later.
func (ch *channel) withdraw(match func(ev []byte) bool) int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.fd < 0 {
		return 0
	}
	var keep [][]byte
	n := 0
	for {
		ev := make([]byte, ch.size)
		got, _, err := unix.Recvfrom(ch.peer, ev, unix.MSG_DONTWAIT)
		if err != nil || got <= 0 {
			break
		}
		if match(ev[:got]) {
			n++
		} else {
			keep = append(keep, ev[:got])
		}
	}
	for _, ev := range keep {
		_ = unix.Sendmsg(ch.fd, ev, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	}
	return n
}

// channelOf finds the completion channel a file the program passed in is its end of.
func (c *Context) channelOf(f *os.File) *channel {
	if f == nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return nil
	}
	for _, ch := range c.chans {
		if ch.ino == st.Ino {
			return ch
		}
	}
	return nil
}
