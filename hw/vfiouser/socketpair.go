package vfiouser

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Socketpair returns two connected stream sockets: a server's end and a client's, for an
// in-process transport (a driver and the function in one process, no QEMU).
func Socketpair() (server, client *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	if server, err = conn(fds[0]); err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	if client, err = conn(fds[1]); err != nil {
		server.Close()
		return nil, nil, err
	}
	return server, client, nil
}
