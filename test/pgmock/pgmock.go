package pgmock

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Server is a scripted PostgreSQL server on loopback. It accepts any
// startup without a password, and answers every row-returning statement
// (SELECT, WITH, VALUES) with the same Rows rows shaped like
// pgbench_accounts, every other statement (SET, DISCARD ALL, RESET,
// DEALLOCATE, BEGIN...) with its CommandComplete alone. It tracks the
// transaction status that ReadyForQuery reports (BEGIN, COMMIT, ROLLBACK),
// since a transaction-mode pool releases servers on 'I'.
//
// A statement containing FailMark fails (SQLSTATE XX000, "pgmock:
// scripted failure"), as PostgreSQL fails a statement: the rest of a
// simple Query is skipped, an extended batch is skipped up to its Sync,
// and a transaction block is left failed ('E') until ROLLBACK. A Bind or
// Describe of a statement the connection does not hold fails with 26000.
// Every frontend message a connection receives is logged (Received), so a
// test can check what a proxy sent, injected messages included.
//
// Each connection is served by one goroutine; Close stops accepting, closes
// every connection and waits for those goroutines.
type Server struct {
	ln   net.Listener
	rows int

	rowDesc []byte // RowDescription
	result  []byte // Rows DataRows + CommandComplete "SELECT Rows"

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	log   [][]string // per connection, in accept order: the messages received (Received)
}

// FailMark in a statement makes it fail.
const FailMark = "pgmock_fail"

// pgbench_accounts (aid int4, bid int4, abalance int4, filler char(84)).
var accountsFields = []pgproto3.FieldDescription{
	{Name: []byte("aid"), TableOID: 16400, TableAttributeNumber: 1, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("bid"), TableOID: 16400, TableAttributeNumber: 2, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("abalance"), TableOID: 16400, TableAttributeNumber: 3, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("filler"), TableOID: 16400, TableAttributeNumber: 4, DataTypeOID: 1042, DataTypeSize: -1, TypeModifier: 88},
}

// Start listens on 127.0.0.1:0 and serves until Close; row-returning
// statements return rows rows.
func Start(rows int) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, rows: rows, conns: map[net.Conn]struct{}{}}
	s.rowDesc = mustEncode(nil, &pgproto3.RowDescription{Fields: accountsFields})
	filler := []byte(strings.Repeat(" ", 84))
	for i := range rows {
		aid := []byte(strconv.Itoa(i + 1))
		s.result = mustEncode(s.result, &pgproto3.DataRow{Values: [][]byte{aid, []byte("1"), []byte("0"), filler}})
	}
	s.result = mustEncode(s.result, &pgproto3.CommandComplete{CommandTag: []byte("SELECT " + strconv.Itoa(rows))})
	s.wg.Go(s.accept)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its connections' goroutines.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Received is, per connection in the order they were accepted, the
// frontend messages received after startup, as "Parse s1", "Bind s1",
// "Execute", "Sync", "Query BEGIN"...
func (s *Server) Received() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]string, len(s.log))
	for i, l := range s.log {
		out[i] = append([]string(nil), l...)
	}
	return out
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		idx := len(s.log)
		s.log = append(s.log, nil)
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			_ = s.serve(c, idx)
		})
	}
}

// fakeConn is one connection's protocol state.
type fakeConn struct {
	s       *Server
	idx     int  // in s.log
	skip    bool // an extended batch failed: messages are skipped up to Sync
	be      *pgproto3.Backend
	w       *bufio.Writer
	scratch []byte
	tx      byte              // 'I' or 'T'
	stmts   map[string]string // prepared statement name -> query
	portals map[string]string // portal name -> query
}

func (s *Server) serve(c net.Conn, idx int) error {
	fc := &fakeConn{s: s, idx: idx, be: pgproto3.NewBackend(c, c), w: bufio.NewWriterSize(c, 32<<10), tx: 'I',
		stmts: map[string]string{}, portals: map[string]string{}}
	if err := fc.startup(); err != nil {
		return err
	}
	for {
		msg, err := fc.be.Receive()
		if err != nil {
			return err
		}
		fc.record(msg)
		if fc.skip {
			switch msg.(type) {
			case *pgproto3.Sync:
				fc.skip = false
			case *pgproto3.Terminate:
				return nil
			default:
				continue // skipped up to Sync, as after an error
			}
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			fc.query(m.String)
			fc.send(&pgproto3.ReadyForQuery{TxStatus: fc.tx})
			err = fc.w.Flush()
		case *pgproto3.Parse:
			if fc.fails(m.Query) {
				break
			}
			fc.stmts[m.Name] = m.Query
			fc.send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			q, ok := fc.stmts[m.PreparedStatement]
			if !ok {
				fc.fail("26000", fmt.Sprintf("prepared statement %q does not exist", m.PreparedStatement))
				break
			}
			fc.portals[m.DestinationPortal] = q
			fc.send(&pgproto3.BindComplete{})
		case *pgproto3.Describe:
			if _, ok := fc.stmts[m.Name]; m.ObjectType == 'S' && !ok {
				fc.fail("26000", fmt.Sprintf("prepared statement %q does not exist", m.Name))
				break
			}
			fc.describe(m)
		case *pgproto3.Execute:
			if q := fc.portals[m.Portal]; !fc.fails(q) {
				fc.execute(q)
			}
		case *pgproto3.Close:
			if m.ObjectType == 'S' {
				delete(fc.stmts, m.Name)
			} else {
				delete(fc.portals, m.Name)
			}
			fc.send(&pgproto3.CloseComplete{})
		case *pgproto3.Sync:
			if fc.tx == 'I' {
				clear(fc.portals) // portals end with their transaction
			}
			fc.send(&pgproto3.ReadyForQuery{TxStatus: fc.tx})
			err = fc.w.Flush()
		case *pgproto3.Flush:
			err = fc.w.Flush()
		case *pgproto3.Terminate:
			return nil
		default:
			return fmt.Errorf("pgmock: unexpected %T", msg)
		}
		if err != nil {
			return err
		}
	}
}

// record logs msg in Received.
func (fc *fakeConn) record(msg pgproto3.FrontendMessage) {
	var e string
	switch m := msg.(type) {
	case *pgproto3.Query:
		e = "Query " + m.String
	case *pgproto3.Parse:
		e = "Parse " + m.Name
	case *pgproto3.Bind:
		e = "Bind " + m.PreparedStatement
	case *pgproto3.Describe:
		e = "Describe " + string(m.ObjectType) + " " + m.Name
	case *pgproto3.Close:
		e = "Close " + string(m.ObjectType) + " " + m.Name
	default:
		e = strings.TrimPrefix(fmt.Sprintf("%T", msg), "*pgproto3.")
	}
	fc.s.mu.Lock()
	fc.s.log[fc.idx] = append(fc.s.log[fc.idx], e)
	fc.s.mu.Unlock()
}

// fails fails sql when it contains FailMark, or when the transaction
// block already failed (25P02), and reports whether it did.
func (fc *fakeConn) fails(sql string) bool {
	switch {
	case fc.tx == 'E' && !isRollback(sql):
		fc.fail("25P02", "current transaction is aborted, commands ignored until end of transaction block")
	case strings.Contains(sql, FailMark):
		fc.fail("XX000", "pgmock: scripted failure")
	default:
		return false
	}
	return true
}

// fail answers an ErrorResponse, flushed at once: the extended batch is
// skipped up to its Sync (Flush included) and a transaction block fails.
func (fc *fakeConn) fail(code, msg string) {
	fc.send(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg})
	fc.w.Flush() // as PostgreSQL flushes every error at once (elog.c); a write error shows at the next Flush
	fc.skip = true
	if fc.tx == 'T' {
		fc.tx = 'E'
	}
}

// isRollback: a statement a failed transaction block accepts (COMMIT
// there rolls back too).
func isRollback(sql string) bool {
	w := strings.Fields(strings.ToUpper(sql))
	return len(w) > 0 && (w[0] == "ROLLBACK" || w[0] == "ABORT" || w[0] == "COMMIT" || w[0] == "END")
}

// startup answers SSLRequest and GSSEncRequest with 'N', and a
// StartupMessage with AuthenticationOk and the usual ParameterStatus.
func (fc *fakeConn) startup() error {
	for {
		msg, err := fc.be.ReceiveStartupMessage()
		if err != nil {
			return err
		}
		switch msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := fc.w.Write([]byte{'N'}); err != nil {
				return err
			}
			if err := fc.w.Flush(); err != nil {
				return err
			}
		case *pgproto3.StartupMessage:
			fc.send(&pgproto3.AuthenticationOk{})
			for _, kv := range [][2]string{
				{"application_name", ""}, {"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"},
				{"integer_datetimes", "on"}, {"IntervalStyle", "postgres"}, {"is_superuser", "off"},
				{"server_encoding", "UTF8"}, {"server_version", "15.0 (pgmock)"},
				{"standard_conforming_strings", "on"}, {"TimeZone", "UTC"},
			} {
				fc.send(&pgproto3.ParameterStatus{Name: kv[0], Value: kv[1]})
			}
			fc.send(&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}})
			fc.send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			return fc.w.Flush()
		case *pgproto3.CancelRequest:
			return io.EOF
		default:
			return fmt.Errorf("pgmock: unexpected startup %T", msg)
		}
	}
}

// query answers a simple Query: every statement gets its results and
// CommandComplete; the caller sends the one ReadyForQuery.
func (fc *fakeConn) query(sql string) {
	stmts := splitStatements(sql)
	if len(stmts) == 0 {
		fc.send(&pgproto3.EmptyQueryResponse{})
		return
	}
	for _, st := range stmts {
		if fc.fails(st) {
			fc.skip = false // (a simple Query ends at its ReadyForQuery)
			return
		}
		if returnsRows(st) {
			fc.w.Write(fc.s.rowDesc)
			fc.w.Write(fc.s.result)
			continue
		}
		fc.send(&pgproto3.CommandComplete{CommandTag: []byte(fc.command(st))})
	}
}

func (fc *fakeConn) describe(m *pgproto3.Describe) {
	var sql string
	if m.ObjectType == 'S' {
		sql = fc.stmts[m.Name]
		oids := make([]uint32, maxParam(sql))
		for i := range oids {
			oids[i] = 25 // text: the fake server takes any parameter as text
		}
		fc.send(&pgproto3.ParameterDescription{ParameterOIDs: oids})
	} else {
		sql = fc.portals[m.Name]
	}
	if returnsRows(sql) {
		fc.w.Write(fc.s.rowDesc)
	} else {
		fc.send(&pgproto3.NoData{})
	}
}

func (fc *fakeConn) execute(sql string) {
	if returnsRows(sql) {
		fc.w.Write(fc.s.result)
		return
	}
	if strings.TrimSpace(sql) == "" {
		fc.send(&pgproto3.EmptyQueryResponse{})
		return
	}
	fc.send(&pgproto3.CommandComplete{CommandTag: []byte(fc.command(sql))})
}

// command returns the CommandComplete tag of a statement that returns no
// rows, updating the transaction status.
func (fc *fakeConn) command(sql string) string {
	words := strings.Fields(strings.ToUpper(sql))
	tag := words[0]
	switch tag {
	case "BEGIN", "START":
		fc.tx = 'T'
		return "BEGIN"
	case "COMMIT", "END":
		failed := fc.tx == 'E'
		fc.tx = 'I'
		if failed {
			return "ROLLBACK"
		}
		return "COMMIT"
	case "ROLLBACK", "ABORT":
		fc.tx = 'I'
		return "ROLLBACK"
	case "DISCARD", "DEALLOCATE":
		if words[len(words)-1] == "ALL" {
			return tag + " ALL"
		}
	}
	return tag
}

func (fc *fakeConn) send(msg pgproto3.BackendMessage) {
	fc.scratch = mustEncode(fc.scratch[:0], msg)
	fc.w.Write(fc.scratch) // a write error shows at the next Flush
}

func mustEncode(dst []byte, msg pgproto3.BackendMessage) []byte {
	b, err := msg.Encode(dst)
	if err != nil {
		panic(err)
	}
	return b
}

func returnsRows(sql string) bool {
	s := strings.TrimLeft(sql, " \t\r\n(")
	for _, kw := range []string{"SELECT", "WITH", "VALUES"} {
		if len(s) >= len(kw) && strings.EqualFold(s[:len(kw)], kw) {
			return true
		}
	}
	return false
}

// splitStatements splits a simple Query at semicolons outside quotes and
// drops empty statements.
func splitStatements(sql string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';':
			if st := strings.TrimSpace(sql[start:i]); st != "" {
				out = append(out, st)
			}
			start = i + 1
		}
	}
	if st := strings.TrimSpace(sql[start:]); st != "" {
		out = append(out, st)
	}
	return out
}

// maxParam returns the highest $N placeholder in sql.
func maxParam(sql string) int {
	n := 0
	for i := 0; i < len(sql); i++ {
		if sql[i] != '$' {
			continue
		}
		j := i + 1
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		if v, err := strconv.Atoi(sql[i+1 : j]); err == nil && v > n {
			n = v
		}
		i = j - 1
	}
	return n
}
