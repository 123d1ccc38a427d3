// Package emu is softirdma's Go verbs API in one import: the RDMA engine (emu/engine), the
// deterministic simulator it is tested on (emu/sim: a virtual clock and a fabric of links with
// seeded faults and a pcap) and the engine in real time on a real link (emu/realtime: the wall
// clock and Host). Every name of the three is here under the same name, as type aliases and
// forwarding functions, so a program written against emu reads as one package. go doc shows an
// alias without the methods of the type it names; each alias's comment gives the go doc command
// that shows them (go doc github.com/softirdma/softirdma/emu/engine.QP for emu.QP).
package emu
