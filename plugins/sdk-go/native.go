//go:build !wasip1

package kubeplug

import (
	"fmt"
	"os"
)

// hostLog outside Wasm (unit tests of plugin logic): to stderr.
func hostLog(level Level, message string, fields [][2]string) {
	fmt.Fprintln(os.Stderr, level, message, fields)
}
