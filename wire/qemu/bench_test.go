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

// batch is the 32 frames each benchmark sends per iteration.
const batch = 32

// udpSink is a drained loopback UDP socket to send to.
func udpSink(b *testing.B) *net.UDPConn {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sink.Close() })
	go drain(sink)
	return sink
}

// sendBatches measures send, which sends one batch of frameLen-byte frames, in bytes and
// frames a second.
func sendBatches(b *testing.B, send func() error) {
	b.SetBytes(frameLen * batch)
	b.ReportAllocs()
	for b.Loop() {
		if err := send(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "frames/s")
}

// sendEach is send called once for each frame of a batch.
func sendEach(send func() error) func() error {
	return func() error {
		for range batch {
			if err := send(); err != nil {
				return err
			}
		}
		return nil
	}
}

// frames is a batch of zeroed frameLen-byte frames.
func frames() [][]byte {
	fs := make([][]byte, batch)
	for i := range fs {
		fs[i] = make([]byte, frameLen)
	}
	return fs
}

// BenchmarkDgramSend is the dgram link sending 4 KiB RoCEv2 frames in batches of 32
// (sendmmsg), next to BenchmarkUDPSendBaseline, a plain WriteToUDP loop of the same frames.
func BenchmarkDgramSend(b *testing.B) {
	sink := udpSink(b)
	d, err := ListenDgram("127.0.0.1:0", sink.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	fs := frames()
	sendBatches(b, func() error { _, err := d.SendBatch(fs); return err })
}

func BenchmarkUDPSendBaseline(b *testing.B) {
	sink := udpSink(b)
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	dst := sink.LocalAddr().(*net.UDPAddr)
	frame := make([]byte, frameLen)
	sendBatches(b, sendEach(func() error { _, err := c.WriteToUDP(frame, dst); return err }))
}

// BenchmarkStreamSend is the stream link sending 4 KiB frames in batches of 32 over TCP, next
// to BenchmarkTCPSendBaseline, a plain loop writing the same length-prefixed frames.
func BenchmarkStreamSend(b *testing.B) {
	c, peer := tcpPair(b)
	defer c.Close()
	defer peer.Close()
	go drain(peer)
	s := NewStream(c)
	fs := frames()
	sendBatches(b, func() error { _, err := s.SendBatch(fs); return err })
}

func BenchmarkTCPSendBaseline(b *testing.B) {
	c, peer := tcpPair(b)
	defer c.Close()
	defer peer.Close()
	go drain(peer)
	msg := make([]byte, 4+frameLen)
	binary.BigEndian.PutUint32(msg, frameLen)
	sendBatches(b, sendEach(func() error { _, err := c.Write(msg); return err }))
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
