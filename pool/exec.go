package pool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// execTimeout bounds the proxy's own housekeeping queries (reset, settings).
const execTimeout = 10 * time.Second

// MaxQueryRowLen bounds one DataRow that Query keeps. Query is for the
// proxy's own small lookups (health probes, catalog), never for clients'
// results.
const MaxQueryRowLen = 1 << 20

// Exec runs sql with the simple query protocol on an idle connection and
// waits for ReadyForQuery. Rows are discarded. ParameterStatus messages
// update c.Params and are also passed to onStatus when it is not nil. A
// server error is returned as *pgconn.PgError and leaves the connection
// usable; any other error marks it broken.
func (c *Conn) Exec(sql string, onStatus func(*pgproto3.ParameterStatus)) error {
	c.SetDeadline(time.Now().Add(execTimeout))
	defer c.SetDeadline(time.Time{})
	return c.simpleQuery(sql, onStatus, nil)
}

// Query runs sql with the simple query protocol on an idle connection and
// returns the rows it produced (of every statement in sql, in order), each
// a slice of text-format fields: a copy of the server's bytes, nil for
// NULL. ParameterStatus messages update c.Params.
//
// ctx bounds the whole round trip: its deadline is the socket's for the
// call, and its cancellation interrupts a read or write in progress. A
// server error (*ServerError, errors.As) leaves the connection usable
// unless its severity is FATAL or PANIC; any other error, ctx ending
// included (errors.Is(err, context.DeadlineExceeded) or context.Canceled),
// marks it broken (Broken). Query reads until ReadyForQuery and expects the
// connection idle afterwards; sql must not start a COPY.
//
// Example: Query(ctx, "select 1, null, ”") returns
// [][][]byte{{[]byte("1"), nil, []byte{}}}.
func (c *Conn) Query(ctx context.Context, sql string) ([][][]byte, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, errors.New("query text contains a NUL byte")
	}
	buf, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return c.query(ctx, sql, buf)
}

// QueryParams is Query for one statement with parameters, in the extended
// protocol: Parse (unnamed, parameter types left to the server), Bind of
// args as text ($1 is args[0]), Execute, Sync. The values never become part
// of the statement's text, so they need no quoting: auth_query binds a
// client's user name this way. sql must be a single statement (the server
// refuses several in one Parse).
//
// Example: QueryParams(ctx, "select $1::int + 1", "41") returns
// [][][]byte{{[]byte("42")}}.
func (c *Conn) QueryParams(ctx context.Context, sql string, args ...string) ([][][]byte, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, errors.New("query text contains a NUL byte")
	}
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = []byte(a)
	}
	buf, err := wire.Append(nil, &pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: params}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if err != nil {
		return nil, err
	}
	return c.query(ctx, sql, buf)
}

// query sends msgs and collects the rows of the answer under ctx (Query).
func (c *Conn) query(ctx context.Context, sql string, msgs []byte) ([][][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	var rows [][][]byte
	err := c.roundTrip(msgs, sql, nil, func(body []byte) error {
		row, err := decodeDataRow(body)
		if err == nil {
			rows = append(rows, row)
		}
		return err
	})
	if !stop() {
		// Cancelled: the deadline is spoiled (the AfterFunc may still be
		// setting it), and the answer may be cut short.
		c.broken = true
		if err == nil {
			err = ctx.Err()
		}
	} else {
		c.SetDeadline(time.Time{})
	}
	if err != nil {
		if !isServerError(err) {
			c.broken = true
		}
		return nil, contextError(ctx, err)
	}
	return rows, nil
}

// Broken reports whether the connection was seen broken (an I/O or protocol
// error, a FATAL server error, MarkBroken): it must not be used again.
func (c *Conn) Broken() bool { return c.broken }

// Terminate sends Terminate, bounded by timeout, and closes the socket: the
// polite end of a connection that is not in a pool.
func (c *Conn) Terminate(timeout time.Duration) error {
	if !c.broken {
		c.SetDeadline(time.Now().Add(timeout))
		c.send(&pgproto3.Terminate{})
	}
	return c.Close()
}

// simpleQuery sends sql as a Query message and reads the answer up to
// ReadyForQuery. DataRow bodies go to onRow (the body is only valid during
// the call), or are skipped when onRow is nil; an error from onRow ends the
// call and marks the connection broken. The caller sets the deadline.
func (c *Conn) simpleQuery(sql string, onStatus func(*pgproto3.ParameterStatus), onRow func([]byte) error) error {
	buf, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return c.roundTrip(buf, sql, onStatus, onRow)
}

// roundTrip writes msgs (a Query, or an extended-protocol batch ending
// with Sync) and reads the answer up to ReadyForQuery, as simpleQuery
// describes; sql names the statement in errors.
func (c *Conn) roundTrip(msgs []byte, sql string, onStatus func(*pgproto3.ParameterStatus), onRow func([]byte) error) error {
	if _, err := c.W.Write(msgs); err != nil {
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
			if c.broken && srvErr != nil {
				return srvErr // a FATAL error, then the server closed
			}
			c.broken = true
			return fmt.Errorf("reading server response: %w", err)
		}
		if h.Len > wire.MaxSmallBodyLen && h.Type != 'D' || h.Type == 'D' && onRow != nil && h.Len > MaxQueryRowLen {
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
		case 'D':
			if onRow == nil {
				if err := wire.Discard(c.R, h.Len); err != nil {
					c.broken = true
					return err
				}
				continue
			}
			if body, err = wire.ReadBody(c.R, h.Len, body); err != nil {
				c.broken = true
				return err
			}
			if err := onRow(body); err != nil {
				c.broken = true
				return err
			}
		case 'G', 'H', 'W':
			// CopyInResponse, CopyOutResponse, CopyBothResponse: the server
			// would wait for, or stream, COPY data.
			c.broken = true
			return fmt.Errorf("%q started a COPY", sql)
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

// decodeDataRow splits a DataRow body into its fields, copied; a field of
// length -1 is NULL (nil).
func decodeDataRow(body []byte) ([][]byte, error) {
	if len(body) < 2 {
		return nil, errors.New("malformed DataRow")
	}
	n := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	row := make([][]byte, n)
	for i := range row {
		if len(body) < 4 {
			return nil, errors.New("malformed DataRow")
		}
		l := int32(binary.BigEndian.Uint32(body))
		body = body[4:]
		switch {
		case l == -1:
			continue
		case l < 0 || int(l) > len(body):
			return nil, errors.New("malformed DataRow")
		}
		row[i] = append(make([]byte, 0, l), body[:l]...)
		body = body[l:]
	}
	if len(body) != 0 {
		return nil, errors.New("malformed DataRow")
	}
	return row, nil
}

// QuoteLiteral renders s as an SQL string literal that reads as s whatever
// standard_conforming_strings is (libpq's PQescapeLiteral): quotes doubled,
// and, when s has a backslash, backslashes doubled inside an E'...' literal.
// s must not contain NUL (Query refuses it).
//
//	QuoteLiteral(`{"f"}`)    == `'{"f"}'`
//	QuoteLiteral(`it's`)     == `'it''s'`
//	QuoteLiteral(`a\b`)      == `E'a\\b'`
func QuoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}
