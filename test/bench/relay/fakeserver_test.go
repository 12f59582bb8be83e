package relay

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

// fakeServer is a scripted PostgreSQL server on loopback. It accepts any
// startup without a password, and answers every row-returning statement
// (SELECT, WITH, VALUES) with the same Rows rows shaped like
// pgbench_accounts, every other statement (SET, DISCARD ALL, RESET,
// DEALLOCATE, BEGIN...) with its CommandComplete alone. It tracks the
// transaction status that ReadyForQuery reports (BEGIN, COMMIT, ROLLBACK),
// since a transaction-mode pool releases servers on 'I'. Errors are never
// produced.
//
// Each connection is served by one goroutine; Close stops accepting, closes
// every connection and waits for those goroutines.
type fakeServer struct {
	ln   net.Listener
	rows int

	rowDesc []byte // RowDescription
	result  []byte // Rows DataRows + CommandComplete "SELECT Rows"

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// pgbench_accounts (aid int4, bid int4, abalance int4, filler char(84)).
var accountsFields = []pgproto3.FieldDescription{
	{Name: []byte("aid"), TableOID: 16400, TableAttributeNumber: 1, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("bid"), TableOID: 16400, TableAttributeNumber: 2, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("abalance"), TableOID: 16400, TableAttributeNumber: 3, DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
	{Name: []byte("filler"), TableOID: 16400, TableAttributeNumber: 4, DataTypeOID: 1042, DataTypeSize: -1, TypeModifier: 88},
}

// startFakeServer listens on 127.0.0.1:0 and serves until Close.
func startFakeServer(rows int) (*fakeServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &fakeServer{ln: ln, rows: rows, conns: map[net.Conn]struct{}{}}
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

func (s *fakeServer) Addr() string { return s.ln.Addr().String() }

func (s *fakeServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *fakeServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			_ = s.serve(c)
		})
	}
}

// fakeConn is one connection's protocol state.
type fakeConn struct {
	s       *fakeServer
	be      *pgproto3.Backend
	w       *bufio.Writer
	scratch []byte
	tx      byte              // 'I' or 'T'
	stmts   map[string]string // prepared statement name -> query
	portals map[string]string // portal name -> query
}

func (s *fakeServer) serve(c net.Conn) error {
	fc := &fakeConn{s: s, be: pgproto3.NewBackend(c, c), w: bufio.NewWriterSize(c, 32<<10), tx: 'I',
		stmts: map[string]string{}, portals: map[string]string{}}
	if err := fc.startup(); err != nil {
		return err
	}
	for {
		msg, err := fc.be.Receive()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			fc.query(m.String)
			fc.send(&pgproto3.ReadyForQuery{TxStatus: fc.tx})
			err = fc.w.Flush()
		case *pgproto3.Parse:
			fc.stmts[m.Name] = m.Query
			fc.send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			fc.portals[m.DestinationPortal] = fc.stmts[m.PreparedStatement]
			fc.send(&pgproto3.BindComplete{})
		case *pgproto3.Describe:
			fc.describe(m)
		case *pgproto3.Execute:
			fc.execute(fc.portals[m.Portal])
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
			return fmt.Errorf("fake server: unexpected %T", msg)
		}
		if err != nil {
			return err
		}
	}
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
				{"server_encoding", "UTF8"}, {"server_version", "15.0 (fake)"},
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
			return fmt.Errorf("fake server: unexpected startup %T", msg)
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
		fc.tx = 'I'
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
