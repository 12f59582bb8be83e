// Package benchutil holds what the benchmark tools under test/bench share.
package benchutil

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Tail returns the last n lines of file, for error messages.
func Tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
