package keys

import (
	"errors"
	"syscall"
	"testing"
)

const (
	pdA PD  = 1
	pdB PD  = 2
	qp1 QPN = 0x11
	qp2 QPN = 0x12
)

func newSpace(t testing.TB) *Space {
	t.Helper()
	return New(Config{Rand: Seeded(1)})
}

// reg registers a fresh n-byte buffer at iova and returns its key and bytes.
func reg(t testing.TB, s *Space, pd PD, n int, iova uint64, access Access) (Key, []byte) {
	t.Helper()
	buf := make([]byte, n)
	k, err := s.RegMR(MRSpec{PD: pd, Mem: Contiguous(buf), IOVA: iova, Access: access})
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	return k, buf
}

func allocMW(t testing.TB, s *Space, pd PD, typ MWType) Key {
	t.Helper()
	k, err := s.AllocMW(pd, typ)
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	return k
}

func bind(t testing.TB, s *Space, b Bind) Key {
	t.Helper()
	res, err := s.BindMW(b)
	if err != nil {
		t.Fatalf("BindMW(%+v): %v", b, err)
	}
	return res.Key
}

// wantErrno asserts err wraps errno.
func wantErrno(t testing.TB, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("got %v, want errno %v", err, errno)
	}
}

// wantAccess asserts err is an *AccessError with the given check, status and syndrome.
func wantAccess(t testing.TB, err error, check Check, status Status, syn Syndrome) *AccessError {
	t.Helper()
	var ae *AccessError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want an access error (%s, %s)", err, check, status)
	}
	if ae.Check != check || ae.Status != status || ae.Syndrome != syn {
		t.Fatalf("got check %s status %s syndrome %s (%v), want check %s status %s syndrome %s",
			ae.Check, ae.Status, ae.Syndrome, ae, check, status, syn)
	}
	if ae.Error() == "" {
		t.Fatal("empty reason")
	}
	return ae
}

// remoteOK asserts a remote access succeeds and returns its bytes, flattened.
func remoteOK(t testing.TB, s *Space, a RemoteAccess) []byte {
	t.Helper()
	sp, err := s.Remote(a)
	if err != nil {
		t.Fatalf("Remote(%+v): %v", a, err)
	}
	if sp.Len() != a.Len {
		t.Fatalf("span length %d, want %d", sp.Len(), a.Len)
	}
	out := make([]byte, sp.Len())
	if n := sp.CopyTo(out); uint64(n) != a.Len {
		t.Fatalf("CopyTo copied %d, want %d", n, a.Len)
	}
	return out
}

func remoteFails(t testing.TB, s *Space, a RemoteAccess, check Check) *AccessError {
	t.Helper()
	_, err := s.Remote(a)
	return wantAccess(t, err, check, StatusRemAccessErr, SyndromeRemoteAccess)
}
