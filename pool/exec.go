package pool

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// execTimeout bounds the proxy's own housekeeping queries (reset, settings).
const execTimeout = 10 * time.Second

// Exec runs sql with the simple query protocol on an idle connection and
// waits for ReadyForQuery. Rows are discarded. ParameterStatus messages
// update c.Params and are also passed to onStatus when it is not nil. A
// server error is returned as *pgconn.PgError and leaves the connection
// usable; any other error marks it broken.
func (c *Conn) Exec(sql string, onStatus func(*pgproto3.ParameterStatus)) error {
	c.SetDeadline(time.Now().Add(execTimeout))
	defer c.SetDeadline(time.Time{})
	buf, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	if _, err := c.W.Write(buf); err != nil {
		c.broken = true
		return err
	}
	if err := c.W.Flush(); err != nil {
		c.broken = true
		return err
	}
	var srvErr error
	var body []byte
	for {
		h, err := wire.ReadHeader(c.R)
		if err != nil {
			c.broken = true
			return fmt.Errorf("reading server response: %w", err)
		}
		if h.Len > wire.MaxSmallBodyLen && h.Type != 'D' {
			c.broken = true
			return fmt.Errorf("server message %q of %d bytes during %q", h.Type, h.Len, sql)
		}
		switch h.Type {
		case 'E', 'S':
			if body, err = wire.ReadBody(c.R, h.Len, body); err != nil {
				c.broken = true
				return err
			}
			if h.Type == 'E' {
				var e pgproto3.ErrorResponse
				if err := e.Decode(body); err != nil {
					c.broken = true
					return err
				}
				srvErr = pgconn.ErrorResponseToPgError(&e)
				if e.Severity == "FATAL" || e.Severity == "PANIC" {
					c.broken = true
				}
				continue
			}
			var ps pgproto3.ParameterStatus
			if err := ps.Decode(body); err == nil {
				c.Params[ps.Name] = ps.Value
				if onStatus != nil {
					onStatus(&ps)
				}
			}
		case 'Z':
			var st [1]byte
			if h.Len != 1 {
				c.broken = true
				return errors.New("malformed ReadyForQuery")
			}
			if _, err := io.ReadFull(c.R, st[:]); err != nil {
				c.broken = true
				return err
			}
			if st[0] != 'I' && srvErr == nil {
				c.broken = true
				return fmt.Errorf("server left in transaction state %q after %q", st[0], sql)
			}
			return srvErr
		default:
			if err := wire.Discard(c.R, h.Len); err != nil {
				c.broken = true
				return err
			}
		}
	}
}
