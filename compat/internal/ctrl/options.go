package ctrl

import "fmt"

// Range is an option's value and the range it must keep to, lo..hi.
type Range struct {
	What   string // the option, as an error names it ("port", "QP timeout")
	V      int
	Lo, Hi int
}

// QPRanges are the ranges of the QP timeout exponent (0..31) and retry count (0..7), each
// checked where it is set (not nil).
func QPRanges(timeout, retry *int) []Range {
	var r []Range
	if timeout != nil {
		r = append(r, Range{"QP timeout", *timeout, 0, 31})
	}
	if retry != nil {
		r = append(r, Range{"retry count", *retry, 0, 7})
	}
	return r
}

// OutOfRange is the first of ranges whose value is outside it, worded "PKG: WHAT V is out of
// range (LO..HI)"; nil when every value is within its range.
func OutOfRange(pkg string, ranges ...Range) error {
	for _, r := range ranges {
		if r.V < r.Lo || r.V > r.Hi {
			return fmt.Errorf("%s: %s %d is out of range (%d..%d)", pkg, r.What, r.V, r.Lo, r.Hi)
		}
	}
	return nil
}

// Default sets an option left zero to the tool's default d.
func Default[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
