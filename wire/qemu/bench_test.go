package qemu

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/softirdma/softirdma/wire"
)

// frameLen is a RoCEv2 frame with a 4 KiB payload: Ethernet, IPv4, UDP, BTH, RETH, payload, ICRC.
const frameLen = wire.EthernetLen + wire.IPv4Len + wire.UDPLen + wire.BTHLen + 16 + 4096 + 4

// drain reads from c until it is closed, so the sender never meets a full receive buffer.
func drain(c net.Conn) {
	buf := make([]byte, 65536)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// BenchmarkDgramSend is the dgram link sending 4 KiB RoCEv2 frames in batches of 32
// (sendmmsg), next to BenchmarkUDPSendBaseline, a plain WriteToUDP loop of the same frames.
func BenchmarkDgramSend(b *testing.B) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go drain(sink)
	d, err := ListenDgram("127.0.0.1:0", sink.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	frames := make([][]byte, 32)
	for i := range frames {
		frames[i] = make([]byte, frameLen)
	}
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.SendBatch(frames); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}

func BenchmarkUDPSendBaseline(b *testing.B) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go drain(sink)
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	dst := sink.LocalAddr().(*net.UDPAddr)
	frame := make([]byte, frameLen)
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		for range 32 {
			if _, err := c.WriteToUDP(frame, dst); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}

// BenchmarkStreamSend is the stream link sending 4 KiB frames in batches of 32 over TCP, next
// to BenchmarkTCPSendBaseline, a plain loop writing the same length-prefixed frames.
func BenchmarkStreamSend(b *testing.B) {
	c, peer := tcpPair(b)
	defer c.Close()
	defer peer.Close()
	go drain(peer)
	s := NewStream(c)
	frames := make([][]byte, 32)
	for i := range frames {
		frames[i] = make([]byte, frameLen)
	}
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.SendBatch(frames); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}

func BenchmarkTCPSendBaseline(b *testing.B) {
	c, peer := tcpPair(b)
	defer c.Close()
	defer peer.Close()
	go drain(peer)
	msg := make([]byte, 4+frameLen)
	binary.BigEndian.PutUint32(msg, frameLen)
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		for range 32 {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return c, <-ch
}
