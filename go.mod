module github.com/softirdma/softirdma

go 1.26

require (
	github.com/google/gopacket v1.1.19
	pgregory.net/rapid v1.3.0
)

require (
	golang.org/x/net v0.0.0-20190620200207-3b0461eec859 // indirect
	golang.org/x/sys v0.0.0-20190412213103-97732733099d // indirect
)
