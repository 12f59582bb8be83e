// Package benchutil holds what the benchmark tools under test/bench share.
package benchutil

import (
	"net"
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
