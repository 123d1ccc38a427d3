module github.com/softirdma/softirdma

go 1.26

require (
	github.com/google/gopacket v1.1.19 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
