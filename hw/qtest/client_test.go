package qtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
)

// fakeConn answers from a scripted reply stream and records what the Client sends. The Client
// writes a whole command before it reads, so a script is enough to stand in for QEMU.
type fakeConn struct {
	sent    bytes.Buffer
	replies *strings.Reader
}

func (f *fakeConn) Read(p []byte) (int, error)  { return f.replies.Read(p) }
func (f *fakeConn) Write(p []byte) (int, error) { return f.sent.Write(p) }

func fake(replies string) (*Client, *fakeConn) {
	f := &fakeConn{replies: strings.NewReader(replies)}
	return NewClient(f), f
}

// Each command goes out as QEMU's parser expects it, and each reply is read as QEMU writes it.
func TestCommandBytes(t *testing.T) {
	cases := []struct {
		sent, reply string
		call        func(c *Client) (any, error)
		want        any
	}{
		{"readb 0x1000\n", "OK 0x00000000000000ab\n", func(c *Client) (any, error) { return c.Readb(0x1000) }, uint8(0xab)},
		{"readw 0x1002\n", "OK 0x000000000000abcd\n", func(c *Client) (any, error) { return c.Readw(0x1002) }, uint16(0xabcd)},
		{"readl 0xfee00000\n", "OK 0x00000000deadbeef\n", func(c *Client) (any, error) { return c.Readl(0xfee00000) }, uint32(0xdeadbeef)},
		{"readq 0x0\n", "OK 0xffffffffffffffff\n", func(c *Client) (any, error) { return c.Readq(0) }, ^uint64(0)},
		{"writeb 0x10 0xff\n", "OK\n", func(c *Client) (any, error) { return nil, c.Writeb(0x10, 0xff) }, nil},
		{"writew 0x10 0xbeef\n", "OK\n", func(c *Client) (any, error) { return nil, c.Writew(0x10, 0xbeef) }, nil},
		{"writel 0x10 0x0\n", "OK\n", func(c *Client) (any, error) { return nil, c.Writel(0x10, 0) }, nil},
		{"writeq 0x10 0x8000000000000001\n", "OK\n", func(c *Client) (any, error) { return nil, c.Writeq(0x10, 1<<63|1) }, nil},
		{"inb 0x71\n", "OK 0x0026\n", func(c *Client) (any, error) { return c.Inb(0x71) }, uint8(0x26)},
		{"inw 0xcfe\n", "OK 0x29c0\n", func(c *Client) (any, error) { return c.Inw(0xcfe) }, uint16(0x29c0)},
		{"inl 0xcfc\n", "OK 0x29c08086\n", func(c *Client) (any, error) { return c.Inl(0xcfc) }, uint32(0x29c08086)},
		{"outb 0x70 0xa\n", "OK\n", func(c *Client) (any, error) { return nil, c.Outb(0x70, 0xa) }, nil},
		{"outw 0xcfc 0x6\n", "OK\n", func(c *Client) (any, error) { return nil, c.Outw(0xcfc, 6) }, nil},
		{"outl 0xcf8 0x80000000\n", "OK\n", func(c *Client) (any, error) { return nil, c.Outl(0xcf8, 1<<31) }, nil},
		{"b64read 0x5000 0x3\n", "OK AQID\n", func(c *Client) (any, error) { p := make([]byte, 3); err := c.Read(0x5000, p); return p, err }, []byte{1, 2, 3}},
		{"b64write 0x5000 0x3 AQID\n", "OK\n", func(c *Client) (any, error) { return nil, c.Write(0x5000, []byte{1, 2, 3}) }, nil},
		{"read 0x5000 0x2\n", "OK 0x0aff\n", func(c *Client) (any, error) { p := make([]byte, 2); err := c.ReadHex(0x5000, p); return p, err }, []byte{0x0a, 0xff}},
		{"write 0x5000 0x2 0x0aff\n", "OK\n", func(c *Client) (any, error) { return nil, c.WriteHex(0x5000, []byte{0x0a, 0xff}) }, nil},
		{"memset 0x5000 0x1000 0x5a\n", "OK\n", func(c *Client) (any, error) { return nil, c.Memset(0x5000, 4096, 0x5a) }, nil},
		{"clock_step 1000\n", "OK 2000\n", func(c *Client) (any, error) { return c.ClockStep(1000) }, int64(2000)},
		{"clock_step\n", "OK 123456\n", func(c *Client) (any, error) { return c.ClockStepNext() }, int64(123456)},
		{"clock_set 99\n", "OK 99\n", func(c *Client) (any, error) { return c.ClockSet(99) }, int64(99)},
		{"irq_intercept_in ioapic\n", "OK\n", func(c *Client) (any, error) { return nil, c.InterceptIn("ioapic") }, nil},
		{"irq_intercept_out /machine/x\n", "OK\n", func(c *Client) (any, error) { return nil, c.InterceptOut("/machine/x") }, nil},
		{"endianness\n", "OK little\n", func(c *Client) (any, error) { return nil, c.Sync() }, nil},
	}
	for _, tc := range cases {
		c, f := fake(tc.reply)
		got, err := tc.call(c)
		if err != nil {
			t.Errorf("%q: %v", tc.sent, err)
			continue
		}
		if f.sent.String() != tc.sent {
			t.Errorf("sent %q, want %q", f.sent.String(), tc.sent)
		}
		if b, ok := got.([]byte); ok {
			if !bytes.Equal(b, tc.want.([]byte)) {
				t.Errorf("%q: got % x, want % x", tc.sent, b, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%q: got %#v, want %#v", tc.sent, got, tc.want)
		}
		if f.replies.Len() != 0 {
			t.Errorf("%q: %d reply bytes left unread", tc.sent, f.replies.Len())
		}
	}
}

// IRQ lines before a reply are level changes, applied in order; the reply still belongs to its command.
func TestIRQLinesInterleave(t *testing.T) {
	c, _ := fake("IRQ raise 4\nIRQ raise 255\nIRQ lower 4\nOK 0x00000000000000ab\nIRQ raise 0\nOK\n")
	if v, err := c.Readb(0); err != nil || v != 0xab {
		t.Fatalf("readb %#x, %v", v, err)
	}
	if c.IRQ(4) || !c.IRQ(255) || c.IRQ(0) {
		t.Fatalf("levels 4 %v 255 %v 0 %v", c.IRQ(4), c.IRQ(255), c.IRQ(0))
	}
	if err := c.Writeb(0, 0); err != nil {
		t.Fatal(err)
	}
	if !c.IRQ(0) || c.IRQ(-1) || c.IRQ(256) {
		t.Fatal("IRQ 0 not raised, or an out-of-range IRQ reported")
	}
}

// A refusal is an error naming the command and QEMU's reason, and the next command still works.
func TestCommandRefused(t *testing.T) {
	c, _ := fake("FAIL could not advance time\nERR invalid argument size\nOK 5\n")
	_, err := c.ClockStep(10)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Cmd != "clock_step 10" || ce.Reply != "FAIL could not advance time" {
		t.Fatalf("error %#v", err)
	}
	if err.Error() != "qtest: clock_step 10: FAIL could not advance time" {
		t.Fatalf("message %q", err)
	}
	if err := c.Write(0, []byte{1}); !errors.As(err, &ce) || ce.Reply != "ERR invalid argument size" {
		t.Fatalf("error %v", err)
	}
	if ns, err := c.ClockStep(1); err != nil || ns != 5 {
		t.Fatalf("after refusals: %d, %v", ns, err)
	}
}

// A reply that breaks the protocol is an ErrProtocol, and the Client refuses everything after:
// the stream can no longer be trusted to pair replies with commands.
func TestProtocolErrors(t *testing.T) {
	long := base64.StdEncoding.EncodeToString(make([]byte, 10))
	cases := []struct {
		name, reply string
		call        func(c *Client) error
	}{
		{"unknown line", "HELLO\n", func(c *Client) error { _, err := c.Readl(0); return err }},
		{"bad hex", "OK 0xzz\n", func(c *Client) error { _, err := c.Readl(0); return err }},
		{"no 0x", "OK 12\n", func(c *Client) error { _, err := c.Readl(0); return err }},
		{"too wide for a byte", "OK 0x0000000000000100\n", func(c *Client) error { _, err := c.Readb(0); return err }},
		{"too many digits", "OK 0x10000000000000000\n", func(c *Client) error { _, err := c.Readq(0); return err }},
		{"data after OK", "OK 0x1\n", func(c *Client) error { return c.Writel(0, 0) }},
		{"short base64", "OK AQ==\n", func(c *Client) error { return c.Read(0, make([]byte, 3)) }},
		{"long base64", "OK " + long + "\n", func(c *Client) error { return c.Read(0, make([]byte, 3)) }},
		{"bad base64", "OK A*ID\n", func(c *Client) error { return c.Read(0, make([]byte, 3)) }},
		{"short hex data", "OK 0x0a\n", func(c *Client) error { return c.ReadHex(0, make([]byte, 2)) }},
		{"bad hex data", "OK 0x0g\n", func(c *Client) error { return c.ReadHex(0, make([]byte, 1)) }},
		{"bad clock", "OK soon\n", func(c *Client) error { _, err := c.ClockStep(1); return err }},
		{"bad IRQ", "IRQ raise 256\nOK\n", func(c *Client) error { return c.Writel(0, 0) }},
		{"bad IRQ word", "IRQ up 1\nOK\n", func(c *Client) error { return c.Writel(0, 0) }},
		{"big endian", "OK big\n", func(c *Client) error { return c.Sync() }},
	}
	for _, tc := range cases {
		c, _ := fake(tc.reply + "OK\n")
		err := tc.call(c)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: error %v", tc.name, err)
			continue
		}
		if err2 := c.Writel(0, 0); !errors.Is(err2, ErrProtocol) {
			t.Errorf("%s: the next command got %v", tc.name, err2)
		}
	}
	// A stream that ends mid-reply is an unexpected end of file, also sticky.
	c, _ := fake("OK 0x00")
	if _, err := c.Readl(0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated reply: %v", err)
	}
	if err := c.Sync(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after a truncated reply: %v", err)
	}
}

// Refused locally: what QEMU would assert on (and abort) or split into other commands.
func TestRefusedBeforeSending(t *testing.T) {
	c, f := fake("")
	for name, err := range map[string]error{
		"wrap":       c.Write(^uint64(0), []byte{1, 2}),
		"wrap hex":   c.ReadHex(^uint64(0)-2, make([]byte, 8)),
		"memset":     c.Memset(^uint64(0), 2, 0),
		"step 0":     func() error { _, err := c.ClockStep(0); return err }(),
		"path space": c.InterceptIn("io apic"),
		"path line":  c.InterceptOut("x\nquit"),
		"no path":    c.InterceptIn(""),
	} {
		if err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if f.sent.Len() != 0 {
		t.Fatalf("sent %q", f.sent.String())
	}
}

// A reply line longer than the read buffer is read whole; the data spans chunks as sent.
func TestLongReplies(t *testing.T) {
	data := make([]byte, maxChunk+100)
	for i := range data {
		data[i] = byte(i * 13)
	}
	replies := "OK " + base64.StdEncoding.EncodeToString(data[:maxChunk]) + "\nOK " +
		base64.StdEncoding.EncodeToString(data[maxChunk:]) + "\n"
	c, f := fake(replies)
	got := make([]byte, len(data))
	if err := c.Read(0x100000, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	if want := "b64read 0x100000 0x40000\nb64read 0x140000 0x64\n"; f.sent.String() != want {
		t.Fatalf("sent %q, want %q", f.sent.String(), want)
	}
}

// QEMU's replies are input from another process: no reply stream makes the Client panic, return
// data of the wrong size, or go on after a protocol error.
func FuzzReplies(f *testing.F) {
	f.Add([]byte("OK 0x00000000000000ab\nOK\nOK AQID\nOK 0x0aff\nOK 5\nOK 0x29c08086\nOK little\n"))
	f.Add([]byte("IRQ raise 8\nOK 0x0000000000000001\nIRQ lower 8\nFAIL Unknown command 'x'\n"))
	f.Add([]byte("ERR invalid argument size\nOK\nOK\nOK\nOK\nOK\nOK\n"))
	f.Add([]byte("OK 0x\nOK 0x1 2\nIRQ raise\nOK ===\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := NewClient(&fakeConn{replies: strings.NewReader(string(stream))})
		broken := false
		step := func(err error) {
			if broken && err == nil {
				t.Fatal("a command succeeded after a protocol error")
			}
			if errors.Is(err, ErrProtocol) || errors.Is(err, io.ErrUnexpectedEOF) {
				broken = true
			}
		}
		_, err := c.Readb(0)
		step(err)
		step(c.Writel(0, 1))
		p := make([]byte, 3)
		step(c.Read(0, p))
		step(c.ReadHex(0, p[:2]))
		_, err = c.ClockStep(1)
		step(err)
		_, err = c.Inl(0xcfc)
		step(err)
		step(c.Sync())
		for i := -1; i <= maxIRQ; i++ {
			c.IRQ(i)
		}
	})
}

// WaitL returns as soon as the value is there, and gives up with ctx's error, after one more
// read, once ctx is done.
func TestWaitL(t *testing.T) {
	c, f := fake("OK 0x0000000000000000\nOK 0x000000000000abcd\nOK 0x0000000000000001\n")
	if err := c.WaitL(context.Background(), 0x5000, 0xabcd); err != nil {
		t.Fatal(err)
	}
	if f.sent.String() != "readl 0x5000\nreadl 0x5000\n" {
		t.Fatalf("sent %q", f.sent.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WaitL(ctx, 0x5000, 0xabcd); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "last 0x1") {
		t.Fatalf("cancelled wait: %v", err)
	}
}
