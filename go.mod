module github.com/softirdma/softirdma

go 1.26.0

require (
	github.com/google/gopacket v1.1.19
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
	pgregory.net/rapid v1.3.0
)

require github.com/vishvananda/netns v0.0.5 // indirect
