package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/wire/faultplan"
)

// DefaultTimeout is a Client's Timeout when it has none.
const DefaultTimeout = 10 * time.Second

// Client asks a control socket, one connection a command.
type Client struct {
	Path string
	// Timeout bounds the wait for an answer (0: DefaultTimeout). A socket that does not start
	// answering within two seconds is told apart as not a control socket sooner.
	Timeout time.Duration
}

// Add adds a fault and returns its number.
func (c Client) Add(f faultplan.Fault) (int, error) {
	answer, err := c.ask("add "+f.Spec(), io.Discard)
	if err != nil {
		return 0, err
	}
	id, err := strconv.Atoi(strings.TrimPrefix(answer, "ok "))
	if err != nil {
		return 0, fmt.Errorf("%s answered add with %q, not a fault's number", c.Path, answer)
	}
	return id, nil
}

// List writes a line a fault to w (the package comment has its form).
func (c Client) List(w io.Writer) error {
	_, err := c.ask("list", w)
	return err
}

// Remove removes fault id.
func (c Client) Remove(id int) error {
	_, err := c.ask("remove "+strconv.Itoa(id), io.Discard)
	return err
}

// Ports writes a line a port to w (the package comment has its form).
func (c Client) Ports(w io.Writer) error {
	_, err := c.ask("ports", w)
	return err
}

// AnswerError is the control socket's refusal of a command: its "error WHY" answer.
type AnswerError struct{ Why string }

func (e *AnswerError) Error() string { return e.Why }

// NotControlError is a socket that is not a control socket, and how that showed.
type NotControlError struct{ Path, How string }

func (e *NotControlError) Error() string {
	return fmt.Sprintf("%s is not a softirdma control socket (%s)", e.Path, e.How)
}

// ConnError is a connection to the socket that could not be made or written to (Err: the
// connect's error, which says whether the socket exists and whether anyone listens on it).
type ConnError struct {
	Path string
	Err  error
}

func (e *ConnError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// CutError is an answer that began as a control socket's and did not end: within Timeout, when
// that is not 0, or before the connection did (Err).
type CutError struct {
	Timeout time.Duration
	Err     error
}

func (e *CutError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("the answer did not end within %v", e.Timeout)
	}
	return fmt.Sprintf("the connection ended before the answer did (%v)", e.Err)
}

func (e *CutError) Unwrap() error { return e.Err }

// firstAnswer bounds the wait for the first line of an answer, which a control socket writes
// at once: a server of another kind (a function's vfio-user socket, which waits for QEMU to
// speak first) is told apart in this long, not in Timeout's.
const firstAnswer = 2 * time.Second

// answerLine is a line a control socket answers with: ok (a fault's number after add), error
// and why, or a listing's line (a fault's, which starts with its number, or a port's).
var answerLine = regexp.MustCompile(`^(ok|ok [0-9]+|error .+|[0-9]+ .+|port .+)$`)

// ask sends line and copies the listing that answers it to listing; it returns the answer's
// last line, "ok..." ("error WHY" is an *AnswerError).
func (c Client) ask(line string, listing io.Writer) (string, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	conn, err := net.DialTimeout("unix", c.Path, timeout)
	switch {
	case errors.Is(err, syscall.EPROTOTYPE):
		return "", &NotControlError{c.Path, "a datagram socket"}
	case err != nil:
		return "", &ConnError{c.Path, err}
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(min(firstAnswer, timeout)))
	if _, err := fmt.Fprintln(conn, line); err != nil {
		return "", &ConnError{c.Path, err}
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 256), MaxLine)
	read := 0
	for ; sc.Scan(); read++ {
		l := sc.Text()
		if read == 0 {
			if !answerLine.MatchString(l) {
				return "", &NotControlError{c.Path, fmt.Sprintf("it answered %q", clip(l, 60))}
			}
			_ = conn.SetDeadline(start.Add(timeout)) // a control socket answers; the rest of a listing may take longer
		}
		if why, ok := strings.CutPrefix(l, "error "); ok {
			return "", &AnswerError{why}
		}
		if l == "ok" || strings.HasPrefix(l, "ok ") {
			return l, nil
		}
		fmt.Fprintln(listing, l)
	}
	return "", c.unanswered(sc.Err(), read, min(firstAnswer, timeout), timeout)
}

// unanswered is the error of an answer that ended, with err, after read lines: a socket that
// said nothing a control socket says is not one.
func (c Client) unanswered(err error, read int, first, timeout time.Duration) error {
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	switch {
	case read == 0 && timedOut:
		return &NotControlError{c.Path, fmt.Sprintf("it answered nothing within %v: a function's vfio-user socket?", first)}
	case read == 0 && errors.Is(err, bufio.ErrTooLong):
		return &NotControlError{c.Path, fmt.Sprintf("it answered a line longer than %d bytes", MaxLine)}
	case read == 0:
		return &NotControlError{c.Path, "it closed the connection without answering"}
	case timedOut:
		return &CutError{Timeout: timeout}
	}
	return &CutError{Err: err}
}

// clip is s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
