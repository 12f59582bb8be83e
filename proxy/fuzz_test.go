package proxy

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
	"github.com/pg-kinetic/pg-kinetic/test/pgmock"
)

// Fuzz targets for every decoder the proxy runs on client bytes after the
// startup packet (FuzzAdmit covers the startup phase as a whole): the
// frontend messages, the startup options, the authentication messages, the
// pg_kinetic.* session commands, and the relay loop itself against a
// scripted server. make fuzz runs each for a bounded time
// (scripts/fuzz.sh); go test runs their seeds.

// frontendTypes are the message types a client may send once logged in,
// with the authentication message 'p'.
const frontendTypes = "QPBFdSHXCDEcfp"

func encodeAll(msgs ...wire.Encoder) []byte {
	b, err := wire.Append(nil, msgs...)
	if err != nil {
		panic(err)
	}
	return b
}

// frontendMessage is pgproto3's decoder for a frontend message type ('p' as
// each of the three authentication messages it may be).
func frontendMessages(typ byte) []pgproto3.FrontendMessage {
	switch typ {
	case 'Q':
		return []pgproto3.FrontendMessage{&pgproto3.Query{}}
	case 'P':
		return []pgproto3.FrontendMessage{&pgproto3.Parse{}}
	case 'B':
		return []pgproto3.FrontendMessage{&pgproto3.Bind{}}
	case 'F':
		return []pgproto3.FrontendMessage{&pgproto3.FunctionCall{}}
	case 'd':
		return []pgproto3.FrontendMessage{&pgproto3.CopyData{}}
	case 'c':
		return []pgproto3.FrontendMessage{&pgproto3.CopyDone{}}
	case 'f':
		return []pgproto3.FrontendMessage{&pgproto3.CopyFail{}}
	case 'S':
		return []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	case 'H':
		return []pgproto3.FrontendMessage{&pgproto3.Flush{}}
	case 'X':
		return []pgproto3.FrontendMessage{&pgproto3.Terminate{}}
	case 'C':
		return []pgproto3.FrontendMessage{&pgproto3.Close{}}
	case 'D':
		return []pgproto3.FrontendMessage{&pgproto3.Describe{}}
	case 'E':
		return []pgproto3.FrontendMessage{&pgproto3.Execute{}}
	case 'p':
		return []pgproto3.FrontendMessage{&pgproto3.PasswordMessage{}, &pgproto3.SASLInitialResponse{}, &pgproto3.SASLResponse{}}
	}
	return nil
}

// FuzzFrontendMessage decodes any body as each frontend message type the
// proxy reads. Properties: frontendLimit accepts exactly the relay phase's
// types; the proxy's own light decoders (parseNames, bindStatement,
// describeTarget, stmtRef) agree with pgproto3 on every body pgproto3
// accepts; and a body pgproto3 accepts survives decode→encode→decode
// unchanged, so what the proxy re-encodes (injected Parse, answered
// Describe) is what the client meant.
func FuzzFrontendMessage(f *testing.F) {
	for _, m := range []wire.Encoder{
		&pgproto3.Query{String: "select 1"},
		&pgproto3.Parse{Name: "s1", Query: "select $1::int", ParameterOIDs: []uint32{23}},
		&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s1", ParameterFormatCodes: []int16{1},
			Parameters: [][]byte{{0, 0, 0, 1}, nil}, ResultFormatCodes: []int16{0, 1}},
		&pgproto3.Describe{ObjectType: 'S', Name: "s1"},
		&pgproto3.Describe{ObjectType: 'P', Name: ""},
		&pgproto3.Execute{Portal: "p", MaxRows: 1},
		&pgproto3.Close{ObjectType: 'S', Name: "s1"},
		&pgproto3.FunctionCall{Function: 1598, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("x")}, ResultFormatCode: 1},
		&pgproto3.CopyData{Data: []byte("1\t2\n")},
		&pgproto3.CopyFail{Message: "client gave up"},
		&pgproto3.SASLInitialResponse{AuthMechanism: scramMech, Data: []byte("n,,n=,r=abcdef")},
		&pgproto3.PasswordMessage{Password: "md5" + strings.Repeat("0", 32)},
	} {
		b := encodeAll(m)
		f.Add(b[0], b[5:])
	}
	f.Add(byte('B'), []byte{0, 0, 0xff, 0xff}) // negative format code count
	f.Add(byte('B'), []byte{0, 's', 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 0, 0})
	f.Add(byte('D'), []byte{'S'})
	f.Add(byte('E'), []byte{'p', 0, 0, 0})
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		limit, ok := frontendLimit(typ)
		if want := strings.IndexByte(frontendTypes[:len(frontendTypes)-1], typ) >= 0; ok != want {
			t.Fatalf("frontendLimit(%q) accepted = %v, want %v", typ, ok, want)
		}
		if ok && (limit < wire.MaxSmallBodyLen || limit > wire.MaxLargeBodyLen) {
			t.Fatalf("frontendLimit(%q) = %d", typ, limit)
		}
		for _, m := range frontendMessages(typ) {
			err := m.Decode(body)
			if err == nil {
				roundTrip(t, m, typ)
			}
			switch m := m.(type) {
			case *pgproto3.Parse:
				name, query, perr := parseNames(body)
				if err == nil && (perr != nil || name != m.Name || query != m.Query) {
					t.Fatalf("parseNames(%q) = %q, %q, %v; pgproto3: %q, %q", body, name, query, perr, m.Name, m.Query)
				}
			case *pgproto3.Bind:
				name, berr := bindStatement(body)
				if err == nil && (berr != nil || name != m.PreparedStatement) {
					t.Fatalf("bindStatement(%q) = %q, %v; pgproto3: %q", body, name, berr, m.PreparedStatement)
				}
				if ref, ok := stmtRef('B', body); err == nil && (!ok || ref != m.PreparedStatement) {
					t.Fatalf("stmtRef(B, %q) = %q, %v", body, ref, ok)
				}
			case *pgproto3.Describe:
				kind, name, derr := describeTarget(body)
				if err == nil && (derr != nil || kind != m.ObjectType || name != m.Name) {
					t.Fatalf("describeTarget(%q) = %q, %q, %v; pgproto3: %q, %q", body, kind, name, derr, m.ObjectType, m.Name)
				}
				if ref, ok := stmtRef('D', body); err == nil && (ok != (m.ObjectType == 'S') || ok && ref != m.Name) {
					t.Fatalf("stmtRef(D, %q) = %q, %v", body, ref, ok)
				}
			case *pgproto3.Close:
				kind, name, derr := describeTarget(body)
				if err == nil && (derr != nil || kind != m.ObjectType || name != m.Name) {
					t.Fatalf("describeTarget(Close %q) = %q, %q, %v; pgproto3: %q, %q", body, kind, name, derr, m.ObjectType, m.Name)
				}
			}
		}
	})
}

// roundTrip encodes m (decoded from a body of type typ), decodes the
// encoding again, and requires the same message.
func roundTrip(t *testing.T, m pgproto3.FrontendMessage, typ byte) {
	t.Helper()
	enc, err := m.Encode(nil)
	if err != nil {
		return // pgproto3 refuses to encode what it decoded (too many values): nothing is re-sent
	}
	if enc[0] != typ {
		t.Fatalf("%T encodes as type %q, decoded from %q", m, enc[0], typ)
	}
	again := reflect.New(reflect.TypeOf(m).Elem()).Interface().(pgproto3.FrontendMessage)
	if err := again.Decode(enc[5:]); err != nil {
		t.Fatalf("%T: its own encoding %q does not decode: %v", m, enc, err)
	}
	if !sameMessage(m, again) {
		t.Fatalf("round trip changed the message:\n%#v\n%#v", m, again)
	}
}

// sameMessage compares decoded messages, an empty slice equal to nil.
func sameMessage(a, b any) bool {
	ea, _ := a.(interface{ Encode([]byte) ([]byte, error) }).Encode(nil)
	eb, _ := b.(interface{ Encode([]byte) ([]byte, error) }).Encode(nil)
	return bytes.Equal(ea, eb)
}

// FuzzStartupOptions reads any "options" startup parameter as PostgreSQL's
// pg_split_opts does. Properties: a refusal is a FATAL with a SQLSTATE the
// client is told; every accepted setting has a name with no '-' in it; and
// writing the settings back as "-c name=value" words, escaped, reads back
// the same settings.
func FuzzStartupOptions(f *testing.F) {
	f.Add("-c search_path=a,b --work-mem=64MB -cstatement_timeout=5s")
	f.Add(`-c application_name=a\ b\\c`)
	f.Add("-c")
	f.Add("-c =x")
	f.Add("-x")
	f.Add("-c pg_kinetic.query_class=billing_balance")
	f.Add("\\")
	f.Fuzz(func(t *testing.T, opts string) {
		got, err := startupSettings(map[string]string{"user": "app", "options": opts})
		if err != nil {
			requireClientError(t, err, "FATAL")
			return
		}
		var b strings.Builder
		for _, s := range got {
			if s.name == "" || strings.Contains(s.name, "-") {
				t.Fatalf("options %q: setting name %q", opts, s.name)
			}
			b.WriteString("-c ")
			b.WriteString(escapeOption(s.name))
			b.WriteByte('=')
			b.WriteString(escapeOption(s.value))
			b.WriteByte(' ')
		}
		again, err := parseOptions(b.String())
		if err != nil || !reflect.DeepEqual(again, got) && len(again)+len(got) > 0 {
			t.Fatalf("options %q read as %v, written back as %q, read again as %v (%v)", opts, got, b.String(), again, err)
		}
		if q := settingsQuery(got); len(got) > 0 && strings.Count(q, "set_config(") != len(got) {
			t.Fatalf("settings query %q for %d settings", q, len(got))
		}
	})
}

func escapeOption(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\\' || r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// requireClientError asserts err is told to the client as an ErrorResponse
// with a well-formed SQLSTATE and the given severity ("" any).
func requireClientError(t *testing.T, err error, severity string) {
	t.Helper()
	var ce *clientError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a client error", err, err)
	}
	requireSQLState(t, errorResponse(err))
	if severity != "" && ce.severity != severity {
		t.Fatalf("%v: severity %q, want %q", err, ce.severity, severity)
	}
}

func requireSQLState(t *testing.T, e *pgproto3.ErrorResponse) {
	t.Helper()
	if len(e.Code) != 5 || strings.Trim(e.Code, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		t.Fatalf("ErrorResponse %q has SQLSTATE %q", e.Message, e.Code)
	}
	if e.Message == "" || e.Severity == "" {
		t.Fatalf("ErrorResponse %+v without a message or severity", e)
	}
}

// FuzzKineticCommand reads any statement text as a possible SHOW/SET/RESET
// of a pg_kinetic.* variable, and runs what it finds on a session.
// Properties: a SHOW the proxy answers names one of its variables and
// starts with SHOW; a SET/RESET either succeeds with tag SET or RESET or
// fails with an ERROR and a SQLSTATE (never a panic, never FATAL); a
// pg_kinetic.min_lsn that was set is shown back as a token that parses to
// the same position; a query class that was set is one the route knows.
func FuzzKineticCommand(f *testing.F) {
	for _, s := range []string{
		"SHOW pg_kinetic.last_route", "show PG_KINETIC.write_lsn;", "SHOW  pg_kinetic.min_lsn ; ",
		"SET pg_kinetic.min_lsn = '1:0/16B3748'", "SET pg_kinetic.min_lsn TO '0/0'", "RESET pg_kinetic.min_lsn",
		"SET pg_kinetic.query_class = 'billing_balance'", "set pg_kinetic.query_class = nightly",
		"SET LOCAL pg_kinetic.min_lsn = '1:FFFFFFFF/FFFFFFFF'", "SET pg_kinetic.bogus = 1", "RESET ALL",
		"/* pg-kinetic: primary */ SHOW pg_kinetic.query_class", "SET pg_kinetic.min_lsn = '1:0/1'; SELECT 1",
	} {
		f.Add(s)
	}
	route := &config.Route{Name: "main", QueryClasses: []config.QueryClass{{Name: "nightly", Routing: config.ClassPrimaryOnly}}}
	cl := classify.New(classify.Options{CacheSize: -1})
	f.Fuzz(func(t *testing.T, query string) {
		ss := &session{route: route, classifier: cl}
		ss.mu.tx = 'I'
		if name, ok := kineticShowName(query); ok {
			if !strings.HasPrefix(name, "pg_kinetic.") || !strings.EqualFold(firstWord(query), "show") {
				t.Fatalf("%q taken as SHOW %q", query, name)
			}
		}
		cmd, ok := ss.kineticCommand(query)
		if !ok {
			return
		}
		if !containsFold(query, "pg_kinetic") {
			t.Fatalf("%q: a pg_kinetic command without the word", query)
		}
		if cmd.show != "" {
			if _, e := ss.kineticShow(cmd.show); e != nil {
				t.Fatalf("SHOW %s on a new session: %v", cmd.show, e.Message)
			}
			return
		}
		tag, e := ss.kineticSet(cmd.set)
		if e != nil {
			requireSQLState(t, e)
			if e.Severity != "ERROR" {
				t.Fatalf("%q: severity %q", query, e.Severity)
			}
			return
		}
		want := "SET"
		if cmd.set.Reset {
			want = "RESET"
		}
		if tag != want {
			t.Fatalf("%q: tag %q, want %q", query, tag, want)
		}
		switch strings.ToLower(cmd.set.Name) {
		case "pg_kinetic.min_lsn":
			shown, e := ss.kineticShow("pg_kinetic.min_lsn")
			if e != nil {
				t.Fatalf("SHOW after %q: %v", query, e.Message)
			}
			if shown == "" {
				if !ss.mu.fresh.minLSN.IsZero() {
					t.Fatalf("%q: min_lsn %v shown as empty", query, ss.mu.fresh.minLSN)
				}
				return
			}
			tok, err := freshness.ParseToken(shown)
			if err != nil || tok != ss.mu.fresh.minLSN {
				t.Fatalf("%q: shown %q, which reads as %v (%v), set %v", query, shown, tok, err, ss.mu.fresh.minLSN)
			}
		case "pg_kinetic.query_class":
			if _, known := route.QueryClass(ss.queryClass); ss.queryClass != "" && !known {
				t.Fatalf("%q: unknown class %q accepted", query, ss.queryClass)
			}
		}
	})
}

// authClientPacket frames an authentication message as a client sends it.
func authClientPacket(body []byte) []byte {
	b := []byte{'p', 0, 0, 0, 0}
	b = append(b, body...)
	n := len(b) - 1
	b[1], b[2], b[3], b[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// FuzzAuthExchange sends a valid StartupMessage and then any two
// authentication messages: to a SCRAM user (client-first and client-final
// in SASLInitialResponse/SASLResponse bodies) or to an md5 user (the
// PasswordMessage). Properties: what the proxy answers is a well-formed
// stream of backend messages; it never says AuthenticationOk (no guessed
// proof or password logs in); the login ends with exactly one FATAL whose
// SQLSTATE is 28P01 or 08P01, or with a close and no answer (md5's
// malformed message, as PostgreSQL).
func FuzzAuthExchange(f *testing.F) {
	first := encodeAll(&pgproto3.SASLInitialResponse{AuthMechanism: scramMech, Data: []byte("n,,n=,r=rOprNGfwEbeRWgbNEkqO")})
	final := encodeAll(&pgproto3.SASLResponse{Data: []byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")})
	f.Add(false, first[5:], final[5:])
	f.Add(false, []byte("SCRAM-SHA-256-PLUS\x00\x00\x00\x00\x10p=tls-server-end-point,,n=,r=x"), []byte{})
	f.Add(false, []byte("SCRAM-SHA-256\x00\xff\xff\xff\xff"), []byte{})
	f.Add(false, []byte("SCRAM-SHA-256\x00\x00\x00\x00\x09y,,n=,r=a"), []byte("c=eSws,r=a,p=AAAA"))
	f.Add(true, []byte("md5"+strings.Repeat("a", 32)+"\x00"), []byte{})
	f.Add(true, []byte("\x00"), []byte{})
	f.Add(true, []byte("no terminator"), []byte{})
	s := testServer(f, 2*time.Second)
	defer s.Close()
	f.Fuzz(func(t *testing.T, md5User bool, m1, m2 []byte) {
		user := "app"
		if md5User {
			user = "md5app"
		}
		in := startupPacket(map[string]string{"user": user, "database": "app"})
		in = append(in, authClientPacket(m1)...)
		in = append(in, authClientPacket(m2)...)
		out := runClient(t, s, in)
		msgs := backendMessages(t, out)
		var errs []*pgproto3.ErrorResponse
		for _, m := range msgs {
			switch m := m.(type) {
			case *pgproto3.AuthenticationOk:
				t.Fatalf("%s logged in with %q, %q", user, m1, m2)
			case *pgproto3.ErrorResponse:
				errs = append(errs, m)
			}
		}
		if len(errs) == 0 {
			if !md5User {
				t.Fatalf("SCRAM login with %q, %q ended without an answer: %#v", m1, m2, msgs)
			}
			return
		}
		if len(errs) > 1 {
			t.Fatalf("%d ErrorResponses", len(errs))
		}
		e := errs[0]
		requireSQLState(t, e)
		if e.Severity != "FATAL" || e.Code != codeInvalidPassword && e.Code != codeProtocolViolation {
			t.Fatalf("login with %q, %q: %s %s %s", m1, m2, e.Severity, e.Code, e.Message)
		}
	})
}

// backendMessages decodes a stream of backend messages, failing on any
// malformed or truncated one.
func backendMessages(t *testing.T, out []byte) []pgproto3.BackendMessage {
	t.Helper()
	n := 0
	for rest := out; len(rest) > 0; n++ {
		if len(rest) < 5 {
			t.Fatalf("truncated message header after %d messages: %q", n, out)
		}
		size := int(binary.BigEndian.Uint32(rest[1:5])) + 1
		if size < 5 || size > len(rest) {
			t.Fatalf("message %d (%q) of length %d with %d bytes left: %q", n, rest[0], size-1, len(rest), out)
		}
		rest = rest[size:]
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(out), io.Discard)
	msgs := make([]pgproto3.BackendMessage, 0, n)
	for i := 0; i < n; i++ {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("message %d does not decode (%v): %q", i, err, out)
		}
		// Receive reuses its messages: keep a copy of what is checked.
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			cp := *m
			msgs = append(msgs, &cp)
		case *pgproto3.ReadyForQuery:
			cp := *m
			msgs = append(msgs, &cp)
		default:
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// relayRig is a proxy in front of a scripted server (pgmock), for fuzzing
// the relay phase: user md5app logs in with md5 (cheap, so each input
// gets a fresh session).
type relayRig struct {
	srv  *Server
	addr string
	mock *pgmock.Server
	logs *observer.ObservedLogs // kineticd's errors: a recovered panic shows here
}

func newRelayRig(t testing.TB, poolMode string) *relayRig {
	mock, err := pgmock.Start(2)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
pool_mode = %q
[metrics]
listen = ""
[[users]]
name = "md5app"
password = %q
backend_password = "unused"
[[routes]]
name = "main"
database = "app"
[routes.primary]
address = %q
[routes.pool]
size = 4
`, poolMode, md5Hash("md5-secret", "md5app"), mock.Addr())
	cfg, err := config.Parse("fuzz.toml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.ErrorLevel)
	s, err := New(Options{Config: staticConfig{cfg}, Logger: zap.New(core), loginTimeout: 2 * time.Second, connectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	return &relayRig{srv: s, addr: ln.Addr().String(), mock: mock, logs: logs}
}

func (r *relayRig) close() {
	r.srv.Close()
	r.mock.Close()
}

// login opens a session as md5app and reads up to its first ReadyForQuery.
func (r *relayRig) login(t *testing.T) (*net.TCPConn, *pgproto3.Frontend) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	fe := pgproto3.NewFrontend(bufio.NewReader(nc), nc)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "md5app", "database": "app"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("login: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.AuthenticationMD5Password:
			inner := md5.Sum([]byte("md5-secret" + "md5app"))
			outer := md5.Sum(append([]byte(hex.EncodeToString(inner[:])), m.Salt[:]...))
			fe.Send(&pgproto3.PasswordMessage{Password: "md5" + hex.EncodeToString(outer[:])})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
		case *pgproto3.ErrorResponse:
			t.Fatalf("login: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return nc.(*net.TCPConn), fe
		}
	}
}

// goodQuery runs one simple query on a new session and checks the whole
// answer: the scripted server's 2 rows, then ReadyForQuery idle.
func (r *relayRig) goodQuery(t *testing.T) {
	t.Helper()
	nc, fe := r.login(t)
	defer nc.Close()
	fe.Send(&pgproto3.Query{String: "select aid from pgbench_accounts"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("good client after the fuzzed one: %v (got %v)", err, got)
		}
		switch m := m.(type) {
		case *pgproto3.RowDescription:
			got = append(got, "T")
		case *pgproto3.DataRow:
			got = append(got, "D"+string(m.Values[0]))
		case *pgproto3.CommandComplete:
			got = append(got, "C "+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			t.Fatalf("good client after the fuzzed one: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			got = append(got, "Z"+string(m.TxStatus))
			if want := []string{"T", "D1", "D2", "C SELECT 2", "ZI"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("good client after the fuzzed one got %v, want %v", got, want)
			}
			return
		}
	}
}

// FuzzRelay logs in and then sends any bytes as the client's messages, in
// session and in transaction pooling, against a scripted server.
// Properties: once the client stops sending (its write side closed), the
// proxy ends the session within the deadline (no hang); everything it
// sent is a well-formed stream of backend messages whose ErrorResponses
// carry a SQLSTATE; a new client right after gets exactly its own answer
// on the same pool (no leftover of the fuzzed session reaches it); and no
// session panicked (kineticd's log).
func FuzzRelay(f *testing.F) {
	for _, in := range [][]byte{
		encodeAll(&pgproto3.Query{String: "select 1"}),
		encodeAll(&pgproto3.Query{String: "begin; select 1"}),
		encodeAll(&pgproto3.Parse{Name: "s", Query: "select 1"}, &pgproto3.Bind{PreparedStatement: "s"},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}),
		encodeAll(&pgproto3.Parse{Query: "SHOW pg_kinetic.last_route"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}),
		encodeAll(&pgproto3.Query{String: "SET pg_kinetic.min_lsn = '1:0/1'; SHOW pg_kinetic.min_lsn"}),
		encodeAll(&pgproto3.Parse{Query: "select pgmock_fail"}, &pgproto3.Flush{}, &pgproto3.Bind{}, &pgproto3.Sync{}),
		encodeAll(&pgproto3.Bind{PreparedStatement: "nope"}, &pgproto3.Execute{}, &pgproto3.Sync{}),
		encodeAll(&pgproto3.Query{String: "begin"}, &pgproto3.Terminate{}),
		encodeAll(&pgproto3.CopyData{Data: []byte("x")}, &pgproto3.CopyDone{}),
		encodeAll(&pgproto3.FunctionCall{Function: 1}),
		{'Q', 0, 0, 0, 100, 's', 'e', 'l'},
		{'Q', 0x7f, 0xff, 0xff, 0xff},
		{'S', 0, 1, 0, 0},
		{'!', 0, 0, 0, 4},
		{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f},
	} {
		f.Add(false, in)
		f.Add(true, in)
	}
	rigs := map[bool]*relayRig{false: newRelayRig(f, config.PoolModeSession), true: newRelayRig(f, config.PoolModeTransaction)}
	defer rigs[false].close()
	defer rigs[true].close()
	f.Fuzz(func(t *testing.T, txPool bool, in []byte) {
		rig := rigs[txPool]
		nc, _ := rig.login(t)
		defer nc.Close()
		go func() {
			nc.Write(in)
			nc.CloseWrite()
		}()
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, err := io.ReadAll(nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the session did not end within 5 s of the client's EOF (answered %d bytes)", len(out))
		}
		for _, m := range backendMessages(t, out) {
			if e, ok := m.(*pgproto3.ErrorResponse); ok {
				requireSQLState(t, e)
			}
		}
		rig.goodQuery(t)
		// A panic is contained to its session (contain.go), and still a
		// bug: it must not happen, told to the client (XX000) or not.
		for _, e := range rig.logs.TakeAll() {
			if e.Message == "internal error: a panic ended one session" {
				t.Fatalf("a session panicked: %v", e.ContextMap())
			}
		}
	})
}

// firstWord is s's first word, a trailing semicolon cut.
func firstWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimRight(f[0], ";")
}
