// Package names gives the numbers of the tree's enumerations (QP states, completion statuses,
// management classes, reject reasons ...) their names, falling back to the number for one it
// does not know: one way for every String method of a numbered type.
package names

import "fmt"

// Or is k's name in names, or k formatted as a number with format.
func Or[K ~uint8 | ~uint16](names map[K]string, k K, format string) string {
	if s, ok := names[k]; ok {
		return s
	}
	return fmt.Sprintf(format, uint64(k)) // as a number: k's own String would come back here
}

// In is k's name in names, the table indexed by k, or k formatted as a number with format
// where names has none (beyond its end, or empty).
func In[K ~uint8 | ~uint16](names []string, k K, format string) string {
	if int(k) < len(names) && names[k] != "" {
		return names[k]
	}
	return fmt.Sprintf(format, uint64(k))
}
