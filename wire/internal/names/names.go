// Package names gives the numbers of wire's enumerations (management classes and methods,
// reject reasons, port spaces) their names, falling back to the number for one it does not know.
package names

import "fmt"

// Or is k's name in names, or k formatted as a number with format.
func Or[K ~uint8 | ~uint16](names map[K]string, k K, format string) string {
	if s, ok := names[k]; ok {
		return s
	}
	return fmt.Sprintf(format, uint64(k)) // as a number: k's own String would come back here
}
