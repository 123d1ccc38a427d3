// Package qtest drives a QEMU that runs no guest code, through QEMU's qtest protocol: it starts
// the process (Start), speaks the line protocol that reads and writes guest memory, MMIO and I/O
// ports and steps the virtual clock (Client), and finds, configures and interrupts PCI functions
// on top of those accesses (PCI). It is the transport a driver uses to reach a device through
// QEMU's real PCI and vfio-user code; it knows nothing of any particular device.
package qtest

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// maxChunk bounds the bytes one read or write command carries, so that neither side ever holds
// more than a few hundred KiB of encoded line.
const maxChunk = 256 << 10

// maxIRQ is the number of IRQ lines QEMU's qtest server tracks.
const maxIRQ = 256

// ErrProtocol marks a reply that does not follow the qtest protocol. The stream cannot be trusted
// after one, so the Client refuses further commands.
var ErrProtocol = errors.New("qtest: protocol error")

// CommandError is QEMU's refusal of a command: a FAIL or ERR reply. The Client stays usable.
type CommandError struct {
	Cmd   string // the command as sent, long data elided
	Reply string // QEMU's line, without the newline
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("qtest: %s: %s", e.Cmd, e.Reply)
}

// Client speaks the qtest line protocol over a stream. Its methods are safe for concurrent use;
// commands are serialised, as the protocol requires. A transport or protocol error is sticky:
// every later command returns it.
type Client struct {
	mu   sync.Mutex
	w    io.Writer
	r    *bufio.Reader
	line []byte // the current reply line, reused when it spans buffer fills
	cmd  []byte // the command being built, reused
	dec  []byte // decoded data, reused
	err  error  // sticky transport or protocol error
	irq  [maxIRQ]bool
}

// NewClient returns a Client that writes commands to rw and reads replies from it.
func NewClient(rw io.ReadWriter) *Client {
	return &Client{w: rw, r: bufio.NewReaderSize(rw, 64<<10)}
}

// cmdName returns the command for error messages; data-carrying commands are cut at their data.
func cmdName(cmd []byte) string {
	const max = 80
	if len(cmd) > max {
		return string(cmd[:max]) + "..."
	}
	return string(cmd)
}

// roundTrip sends c.cmd and returns the payload of the OK reply (after "OK" and one space),
// valid until the next command. IRQ lines that arrive before the reply update the IRQ levels.
// The caller holds c.mu.
func (c *Client) roundTrip() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	c.cmd = append(c.cmd, '\n')
	cmd := c.cmd[:len(c.cmd)-1]
	if _, err := c.w.Write(c.cmd); err != nil {
		return nil, c.fail(fmt.Errorf("qtest: %s: %w", cmdName(cmd), err))
	}
	for {
		line, err := c.readLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, c.fail(fmt.Errorf("qtest: %s: %w", cmdName(cmd), err))
		}
		kind, payload := classify(line)
		switch kind {
		case lineIRQ:
			n, level, ok := parseIRQ(payload)
			if !ok {
				return nil, c.fail(fmt.Errorf("%w: %s: bad IRQ line %q", ErrProtocol, cmdName(cmd), clip(line)))
			}
			c.irq[n] = level
		case lineOK:
			return payload, nil
		case lineFail:
			return nil, &CommandError{Cmd: cmdName(cmd), Reply: string(clip(line))}
		default:
			return nil, c.fail(fmt.Errorf("%w: %s: reply %q", ErrProtocol, cmdName(cmd), clip(line)))
		}
	}
}

func (c *Client) fail(err error) error {
	c.err = err
	return err
}

// clip shortens a line for an error message.
func clip(b []byte) []byte {
	if len(b) > 120 {
		return b[:120]
	}
	return b
}

// readLine returns the next line without its newline, valid until the next read.
func (c *Client) readLine() ([]byte, error) {
	b, err := c.r.ReadSlice('\n')
	if err == nil {
		return b[:len(b)-1], nil
	}
	if err != bufio.ErrBufferFull {
		return nil, err
	}
	c.line = append(c.line[:0], b...)
	for {
		b, err = c.r.ReadSlice('\n')
		c.line = append(c.line, b...)
		if err == nil {
			return c.line[:len(c.line)-1], nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
		if len(c.line) > 4*maxChunk {
			return nil, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, 4*maxChunk)
		}
	}
}

type lineKind int

const (
	lineBad lineKind = iota
	lineOK
	lineFail
	lineIRQ
)

// classify splits a reply line into its kind and what follows the keyword and one space.
func classify(line []byte) (lineKind, []byte) {
	word, rest := line, []byte(nil)
	for i, ch := range line {
		if ch == ' ' {
			word, rest = line[:i], line[i+1:]
			break
		}
	}
	switch string(word) {
	case "OK":
		return lineOK, rest
	case "FAIL", "ERR":
		return lineFail, rest
	case "IRQ":
		return lineIRQ, rest
	}
	return lineBad, nil
}

// parseIRQ parses "raise N" or "lower N".
func parseIRQ(b []byte) (n int, level, ok bool) {
	var num []byte
	switch {
	case len(b) > 6 && string(b[:6]) == "raise ":
		level, num = true, b[6:]
	case len(b) > 6 && string(b[:6]) == "lower ":
		num = b[6:]
	default:
		return 0, false, false
	}
	v, err := strconv.ParseUint(string(num), 10, 16)
	if err != nil || v >= maxIRQ {
		return 0, false, false
	}
	return int(v), level, true
}

// parseHex parses the "0x..." value of a read reply, which must fit in bits.
func parseHex(b []byte, bits int) (uint64, bool) {
	if len(b) < 3 || b[0] != '0' || b[1] != 'x' || len(b) > 2+16 {
		return 0, false
	}
	var v uint64
	for _, ch := range b[2:] {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		case ch >= 'A' && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	if bits < 64 && v>>bits != 0 {
		return 0, false
	}
	return v, true
}

func (c *Client) start(name string) {
	c.cmd = append(c.cmd[:0], name...)
}

func (c *Client) arg(v uint64) {
	c.cmd = append(c.cmd, ' ', '0', 'x')
	c.cmd = strconv.AppendUint(c.cmd, v, 16)
}

// value sends the command built in c.cmd and parses its "OK 0x..." reply.
func (c *Client) value(bits int) (uint64, error) {
	p, err := c.roundTrip()
	if err != nil {
		return 0, err
	}
	v, ok := parseHex(p, bits)
	if !ok {
		return 0, c.fail(fmt.Errorf("%w: %s: value %q", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1]), clip(p)))
	}
	return v, nil
}

// empty sends the command built in c.cmd and checks its reply is a bare "OK".
func (c *Client) empty() error {
	p, err := c.roundTrip()
	if err != nil {
		return err
	}
	if len(p) != 0 {
		return c.fail(fmt.Errorf("%w: %s: unexpected %q after OK", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1]), clip(p)))
	}
	return nil
}

func (c *Client) read(name string, addr uint64, bits int) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start(name)
	c.arg(addr)
	return c.value(bits)
}

func (c *Client) write(name string, addr, v uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start(name)
	c.arg(addr)
	c.arg(v)
	return c.empty()
}

// Readb reads a byte of guest physical memory (RAM or MMIO) at addr.
func (c *Client) Readb(addr uint64) (uint8, error) { return narrow[uint8](c.read("readb", addr, 8)) }

// Readw reads a little-endian 16-bit value at addr as one access.
func (c *Client) Readw(addr uint64) (uint16, error) { return narrow[uint16](c.read("readw", addr, 16)) }

// Readl reads a little-endian 32-bit value at addr as one access.
func (c *Client) Readl(addr uint64) (uint32, error) { return narrow[uint32](c.read("readl", addr, 32)) }

// Readq reads a little-endian 64-bit value at addr as one access.
func (c *Client) Readq(addr uint64) (uint64, error) {
	return c.read("readq", addr, 64)
}

// Writeb writes a byte at addr.
func (c *Client) Writeb(addr uint64, v uint8) error { return c.write("writeb", addr, uint64(v)) }

// Writew writes a little-endian 16-bit value at addr as one access.
func (c *Client) Writew(addr uint64, v uint16) error { return c.write("writew", addr, uint64(v)) }

// Writel writes a little-endian 32-bit value at addr as one access.
func (c *Client) Writel(addr uint64, v uint32) error { return c.write("writel", addr, uint64(v)) }

// Writeq writes a little-endian 64-bit value at addr as one access.
func (c *Client) Writeq(addr uint64, v uint64) error { return c.write("writeq", addr, v) }

func (c *Client) in(name string, port uint16, bits int) (uint32, error) {
	return narrow[uint32](c.read(name, uint64(port), bits))
}

// narrow is an access's value in the width it was read with.
func narrow[T uint8 | uint16 | uint32](v uint64, err error) (T, error) { return T(v), err }

// Inb reads an I/O port.
func (c *Client) Inb(port uint16) (uint8, error) {
	return narrow[uint8](c.read("inb", uint64(port), 8))
}

// Inw reads a 16-bit I/O port.
func (c *Client) Inw(port uint16) (uint16, error) {
	return narrow[uint16](c.read("inw", uint64(port), 16))
}

// Inl reads a 32-bit I/O port.
func (c *Client) Inl(port uint16) (uint32, error) { return c.in("inl", port, 32) }

// Outb writes an I/O port.
func (c *Client) Outb(port uint16, v uint8) error {
	return c.write("outb", uint64(port), uint64(v))
}

// Outw writes a 16-bit I/O port.
func (c *Client) Outw(port uint16, v uint16) error {
	return c.write("outw", uint64(port), uint64(v))
}

// Outl writes a 32-bit I/O port.
func (c *Client) Outl(port uint16, v uint32) error {
	return c.write("outl", uint64(port), uint64(v))
}

// checkRange refuses a range that wraps the 64-bit address space.
func checkRange(op string, addr uint64, n int) error {
	if addr+uint64(n) < addr && addr+uint64(n) != 0 {
		return fmt.Errorf("qtest: %s 0x%x: %d bytes wrap the address space", op, addr, n)
	}
	return nil
}

// Read fills p from guest physical memory at addr (b64read, in chunks of at most 256 KiB).
func (c *Client) Read(addr uint64, p []byte) error {
	return c.chunked("read", "b64read", addr, p, func(chunk []byte) error {
		r, err := c.roundTrip()
		if err != nil {
			return err
		}
		c.dec = c.dec[:0]
		c.dec, err = base64.StdEncoding.AppendDecode(c.dec, r)
		if err != nil || len(c.dec) != len(chunk) {
			return c.fail(fmt.Errorf("%w: %s: %d bytes of base64 for %d", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1]), len(c.dec), len(chunk)))
		}
		copy(chunk, c.dec)
		return nil
	})
}

// Write copies p to guest physical memory at addr (b64write, in chunks of at most 256 KiB).
func (c *Client) Write(addr uint64, p []byte) error {
	return c.chunked("write", "b64write", addr, p, func(chunk []byte) error {
		c.cmd = append(c.cmd, ' ')
		c.cmd = base64.StdEncoding.AppendEncode(c.cmd, chunk)
		return c.empty()
	})
}

// ReadHex is Read through the hex-encoded "read" command: twice the bytes on the wire, kept
// to compare the encodings and for QEMUs without b64read.
func (c *Client) ReadHex(addr uint64, p []byte) error {
	return c.chunked("read", "read", addr, p, func(chunk []byte) error {
		r, err := c.roundTrip()
		if err != nil {
			return err
		}
		n := len(chunk)
		if len(r) != 2+2*n || r[0] != '0' || r[1] != 'x' {
			return c.fail(fmt.Errorf("%w: %s: %d characters of hex for %d bytes", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1]), len(r), n))
		}
		for i := range n {
			hi, ok1 := nibble(r[2+2*i])
			lo, ok2 := nibble(r[3+2*i])
			if !ok1 || !ok2 {
				return c.fail(fmt.Errorf("%w: %s: bad hex", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1])))
			}
			chunk[i] = hi<<4 | lo
		}
		return nil
	})
}

// WriteHex is Write through the hex-encoded "write" command.
func (c *Client) WriteHex(addr uint64, p []byte) error {
	const digits = "0123456789abcdef"
	return c.chunked("write", "write", addr, p, func(chunk []byte) error {
		c.cmd = append(c.cmd, ' ', '0', 'x')
		for _, b := range chunk {
			c.cmd = append(c.cmd, digits[b>>4], digits[b&15])
		}
		return c.empty()
	})
}

// chunked runs the memory command name over p from addr, one command a chunk of at most
// maxChunk bytes, under the client's lock: each command is begun as "name addr n" and run
// finishes it for its chunk. op names the access in the error for a range that wraps.
func (c *Client) chunked(op, name string, addr uint64, p []byte, run func(chunk []byte) error) error {
	if err := checkRange(op, addr, len(p)); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), maxChunk)
		c.start(name)
		c.arg(addr)
		c.arg(uint64(n))
		if err := run(p[:n]); err != nil {
			return err
		}
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func nibble(ch byte) (byte, bool) {
	switch {
	case ch >= '0' && ch <= '9':
		return ch - '0', true
	case ch >= 'a' && ch <= 'f':
		return ch - 'a' + 10, true
	case ch >= 'A' && ch <= 'F':
		return ch - 'A' + 10, true
	}
	return 0, false
}

// Memset sets n bytes at addr to b.
func (c *Client) Memset(addr, n uint64, b uint8) error {
	if addr+n < addr && addr+n != 0 {
		return fmt.Errorf("qtest: memset 0x%x: %d bytes wrap the address space", addr, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start("memset")
	c.arg(addr)
	c.arg(n)
	c.arg(uint64(b))
	return c.empty()
}

// clock parses the "OK NS" reply of the clock commands.
func (c *Client) clock() (int64, error) {
	p, err := c.roundTrip()
	if err != nil {
		return 0, err
	}
	ns, perr := strconv.ParseInt(string(p), 10, 64)
	if perr != nil {
		return 0, c.fail(fmt.Errorf("%w: %s: clock %q", ErrProtocol, cmdName(c.cmd[:len(c.cmd)-1]), clip(p)))
	}
	return ns, nil
}

// ClockStep advances QEMU's virtual clock by ns nanoseconds (ns > 0), running the timers that
// fall due, and returns the new virtual time.
func (c *Client) ClockStep(ns int64) (int64, error) {
	if ns <= 0 {
		return 0, fmt.Errorf("qtest: clock_step %d: the step must be positive", ns)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start("clock_step ")
	c.cmd = strconv.AppendInt(c.cmd, ns, 10)
	return c.clock()
}

// ClockStepNext advances the virtual clock to the next timer deadline and returns the new time.
// QEMU refuses (a CommandError) when no timer is pending.
func (c *Client) ClockStepNext() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start("clock_step")
	return c.clock()
}

// ClockSet advances the virtual clock to ns (a CommandError if that is in the past).
func (c *Client) ClockSet(ns int64) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start("clock_set ")
	c.cmd = strconv.AppendInt(c.cmd, ns, 10)
	return c.clock()
}

// checkPath refuses a QOM path that would split into several words or lines on QEMU's side.
func checkPath(op, path string) error {
	if path == "" {
		return fmt.Errorf("qtest: %s: empty QOM path", op)
	}
	for i := 0; i < len(path); i++ {
		if path[i] <= ' ' || path[i] == 0x7f {
			return fmt.Errorf("qtest: %s %q: a QOM path has no spaces or control characters", op, path)
		}
	}
	return nil
}

// InterceptIn diverts the input GPIO lines of the device at the QOM path (on q35, "ioapic") to
// the Client: their level changes arrive as IRQ lines, visible through IRQ. QEMU allows one
// intercepted device per process.
func (c *Client) InterceptIn(path string) error { return c.intercept("irq_intercept_in", path) }

// InterceptOut diverts the unnamed output GPIO lines of the device at the QOM path.
func (c *Client) InterceptOut(path string) error { return c.intercept("irq_intercept_out", path) }

func (c *Client) intercept(op, path string) error {
	if err := checkPath(op, path); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start(op)
	c.cmd = append(c.cmd, ' ')
	c.cmd = append(c.cmd, path...)
	return c.empty()
}

// IRQ reports the level of intercepted line n as of the last reply: QEMU sends level changes
// before the reply of the command during which they happened.
func (c *Client) IRQ(n int) bool {
	if n < 0 || n >= maxIRQ {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.irq[n]
}

// Sync sends a command with no effect and waits for its reply, so that every IRQ line QEMU sent
// before it has been seen.
func (c *Client) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start("endianness")
	p, err := c.roundTrip()
	if err != nil {
		return err
	}
	if string(p) != "little" {
		return c.fail(fmt.Errorf("%w: endianness %q: this package speaks to little-endian targets only", ErrProtocol, clip(p)))
	}
	return nil
}

// WaitL reads the 32-bit value at addr until it equals want or ctx is done: how a test or driver
// sees an MSI-X message land in guest RAM. Each read is a round trip in which QEMU's main loop
// also runs, so the wait needs no timer; it keeps the socket busy meanwhile.
func (c *Client) WaitL(ctx context.Context, addr uint64, want uint32) error {
	for {
		v, err := c.Readl(addr)
		if err != nil {
			return err
		}
		if v == want {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("qtest: waiting for 0x%x at 0x%x (last 0x%x): %w", want, addr, v, err)
		}
	}
}
