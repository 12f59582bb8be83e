// Package benchutil holds what the benchmark tools under test/bench share.
package benchutil

import (
	"net"

	"github.com/jackc/pgx/v5/pgconn"
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

// CountRows reads every result of a simple Query and returns the number of
// rows, without keeping them.
func CountRows(mrr *pgconn.MultiResultReader) (int, error) {
	n := 0
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			n++
		}
		if _, err := rr.Close(); err != nil {
			mrr.Close()
			return n, err
		}
	}
	return n, mrr.Close()
}
