package differential

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Target is one place a sequence is replayed: PostgreSQL directly or
// kineticd in one mode.
type Target struct {
	Name     string
	Addr     string // host:port
	User     string
	Password string
	Database string
	// Params are extra startup parameters (the direct target declares the
	// pg_kinetic.* placeholders, see doc.go).
	Params map[string]string
}

// Line is one backend message in canonical form.
type Line struct {
	FE int    // index of the frontend message of the unit it answers
	S  string // canonical text
}

// Result is what one run of a sequence received.
type Result struct {
	Startup []string // ParameterStatus at login, sorted, masked
	Units   [][]Line
	// KineticStatus counts ParameterStatus pg_kinetic.* messages dropped
	// (kineticd's write tokens).
	KineticStatus int
	Elapsed       time.Duration
}

// Hash identifies a result's comparable content.
func (r *Result) Hash() [32]byte {
	h := sha256.New()
	for _, s := range r.Startup {
		io.WriteString(h, s)
		h.Write([]byte{0})
	}
	for _, u := range r.Units {
		h.Write([]byte{1})
		for _, l := range u {
			io.WriteString(h, l.S)
			h.Write([]byte{0})
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Broken says why a run could not finish (a hang, a lost connection, a
// failed login), or "".
func (r *Result) Broken() string {
	for _, s := range r.Startup {
		if strings.HasPrefix(s, connectFail) || strings.HasPrefix(s, "<unexpected") {
			return s
		}
	}
	for _, u := range r.Units {
		for _, l := range u {
			if strings.HasPrefix(l.S, hangPrefix) || strings.HasPrefix(l.S, closedPrefix) {
				return l.S
			}
		}
	}
	return ""
}

// Runner replays sequences.
type Runner struct {
	// Timeout is how long the client waits for the answers to one unit; a
	// longer silence is recorded as a hang and ends the run.
	Timeout time.Duration
	// KnownTables maps table OIDs that are the same on every server (the
	// setup tables) to names; other table OIDs in RowDescription are masked.
	KnownTables map[uint32]string
	// MaskedParams are ParameterStatus names whose values are masked.
	MaskedParams map[string]bool
}

// readOnlyCode is read_only_sql_transaction.
const readOnlyCode = "25006"

// Markers recorded when the run could not go on.
const (
	hangPrefix   = "<no answer within "
	closedPrefix = "<connection lost: "
	connectFail  = "<connect failed: "
)

// Run replays seq against tg with run key key (RunMark's value). A
// sequence marked Twice runs once before, on its own connection and with
// another key, and that first answer is dropped.
func (rn *Runner) Run(ctx context.Context, tg Target, seq Sequence, key int64) Result {
	if seq.Twice {
		rn.run(ctx, tg, seq, key+twiceOffset)
	}
	return rn.run(ctx, tg, seq, key)
}

// twiceOffset makes the first run's key of a Twice sequence; run keys stay
// below it.
const twiceOffset = 1 << 40

func (rn *Runner) run(ctx context.Context, tg Target, seq Sequence, key int64) Result {
	begin := time.Now()
	res := Result{}
	defer func() { res.Elapsed = time.Since(begin) }()
	keyStr := strconv.FormatInt(key, 10)
	mask := func(s string) string { return strings.ReplaceAll(s, keyStr, RunMark) }

	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable connect_timeout=10",
		host(tg.Addr), port(tg.Addr), tg.User, tg.Password, tg.Database))
	if err != nil {
		res.Startup = []string{connectFail + err.Error() + ">"}
		return res
	}
	cfg.RuntimeParams["application_name"] = "diff"
	for k, v := range tg.Params {
		cfg.RuntimeParams[k] = v
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	pc, err := pgconn.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		res.Startup = []string{connectFail + err.Error() + ">"}
		return res
	}
	hc, err := pc.Hijack()
	if err != nil {
		pc.Close(ctx)
		res.Startup = []string{connectFail + err.Error() + ">"}
		return res
	}
	conn := hc.Conn
	defer conn.Close()
	for k, v := range hc.ParameterStatuses {
		if strings.HasPrefix(k, "pg_kinetic.") {
			res.KineticStatus++
			continue
		}
		if rn.MaskedParams[k] {
			v = "<masked>"
		}
		res.Startup = append(res.Startup, "ParameterStatus "+k+"="+v)
	}
	slices.Sort(res.Startup)
	if hc.Frontend.ReadBufferLen() > 0 {
		res.Startup = append(res.Startup, "<unexpected bytes after ReadyForQuery at login>")
		return res
	}
	fe := pgproto3.NewFrontend(conn, conn)
	d := &driver{rn: rn, fe: fe, conn: conn, mask: mask, res: &res, betweenUnits: true}
	for _, u := range seq.Units {
		if !d.unit(render(u, keyStr)) {
			return res
		}
	}
	fe.Send(&pgproto3.Terminate{})
	fe.Flush()
	return res
}

func host(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// render replaces RunMark by the run key in everything the unit sends.
func render(u Unit, key string) Unit {
	r := func(s string) string { return strings.ReplaceAll(s, RunMark, key) }
	rb := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return []byte(r(string(b)))
	}
	conv := func(ms []pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
		out := make([]pgproto3.FrontendMessage, len(ms))
		for i, m := range ms {
			switch m := m.(type) {
			case *pgproto3.Query:
				out[i] = &pgproto3.Query{String: r(m.String)}
			case *pgproto3.Parse:
				out[i] = &pgproto3.Parse{Name: m.Name, Query: r(m.Query), ParameterOIDs: m.ParameterOIDs}
			case *pgproto3.Bind:
				b := *m
				b.Parameters = make([][]byte, len(m.Parameters))
				for j, p := range m.Parameters {
					b.Parameters[j] = rb(p)
				}
				out[i] = &b
			case *pgproto3.CopyData:
				out[i] = &pgproto3.CopyData{Data: rb(m.Data)}
			default:
				out[i] = m
			}
		}
		return out
	}
	return Unit{Msgs: conv(u.Msgs), Copy: conv(u.Copy), Masked: u.Masked, Note: u.Note}
}

// driver sends units on one connection and records the answers.
type driver struct {
	rn   *Runner
	fe   *pgproto3.Frontend
	conn net.Conn
	mask func(string) string
	res  *Result

	open     bool // extended messages sent since the last Sync
	skipping bool // an error in the extended protocol: the server skips to Sync
	lines    []Line
	fe0      int
	masked   bool
	// kineticRows: the last RowDescription is of one pg_kinetic.* column
	// (a SHOW of one, however the generator lost track of the statement:
	// a Parse the server skipped after an error leaves the unnamed
	// statement what it was). Its DataRows are masked until the next
	// CommandComplete, RowDescription or ReadyForQuery.
	kineticRows bool
	// unnamedKinetic: the server's unnamed statement, as this run's
	// answers show it (a ParseComplete, not a Parse the server skipped
	// after an error), is a pg_kinetic.* command; kineticPortals: the
	// portals bound from one. Rows of an Execute of such a portal are
	// masked even without a RowDescription (a Bind and Execute alone).
	unnamedKinetic bool
	kineticPortals map[string]bool
	execMask       bool
	copyData       []pgproto3.FrontendMessage
	// betweenUnits: the last message received (pg_kinetic.* aside) is a
	// ReadyForQuery, or none was since the login. tokenInside: a
	// ParameterStatus pg_kinetic.* came inside a response; only a
	// ParameterStatus or the ReadyForQuery may follow it (where
	// PostgreSQL reports its parameters).
	betweenUnits, tokenInside bool
}

// unit sends one unit and reads its answers; false when the run must end.
func (d *driver) unit(u Unit) bool {
	ms := u.Msgs
	if d.open && len(ms) > 0 {
		if _, ok := ms[0].(*pgproto3.Query); ok {
			// A Query while an extended batch is open (a minimised sequence
			// lost its Sync): end the batch first, the same way on every
			// target.
			ms = append([]pgproto3.FrontendMessage{&pgproto3.Sync{}}, ms...)
		}
	}
	d.lines = nil
	d.masked = u.Masked
	d.copyData = u.Copy
	defer func() { d.res.Units = append(d.res.Units, d.lines) }()
	for _, m := range ms {
		d.fe.Send(m)
	}
	if err := d.fe.Flush(); err != nil {
		d.record(-1, closedPrefix+err.Error()+">")
		return false
	}
	d.conn.SetReadDeadline(time.Now().Add(d.rn.Timeout))
	for i, m := range ms {
		d.fe0 = i
		var ok bool
		switch m.(type) {
		case *pgproto3.Flush:
			continue
		case *pgproto3.Sync:
			ok = d.readUntil(true, isRFQ)
			d.skipping = false
		case *pgproto3.Query:
			ok = d.readUntil(true, isRFQ)
		default:
			if d.skipping {
				continue
			}
			if e, isExec := m.(*pgproto3.Execute); isExec {
				d.execMask = d.kineticPortals[e.Portal]
			}
			ok = d.readUntil(false, terminal(m))
			d.execMask = false
		}
		if !ok {
			return false
		}
		d.follow(i, m)
	}
	switch ms[len(ms)-1].(type) {
	case *pgproto3.Sync, *pgproto3.Query:
		d.open = false
	default:
		d.open = true
	}
	return true
}

// follow notes what message i (m), now answered, did to the unnamed
// statement and the portals (unnamedKinetic, kineticPortals).
func (d *driver) follow(i int, m pgproto3.FrontendMessage) {
	last := ""
	if n := len(d.lines); n > 0 && d.lines[n-1].FE == i {
		last = d.lines[n-1].S
	}
	switch m := m.(type) {
	case *pgproto3.Query:
		d.unnamedKinetic = false
		clear(d.kineticPortals)
	case *pgproto3.Parse:
		if m.Name != "" {
			return
		}
		switch {
		case last == "ParseComplete":
			d.unnamedKinetic = strings.Contains(strings.ToLower(m.Query), "pg_kinetic.")
		case strings.HasPrefix(last, "ErrorResponse"):
			d.unnamedKinetic = false // (PostgreSQL drops the old one before parsing)
		}
	case *pgproto3.Close:
		if m.ObjectType == 'S' && m.Name == "" && last == "CloseComplete" {
			d.unnamedKinetic = false
		}
	case *pgproto3.Bind:
		if last != "BindComplete" {
			return
		}
		if d.kineticPortals == nil {
			d.kineticPortals = map[string]bool{}
		}
		d.kineticPortals[m.DestinationPortal] = m.PreparedStatement == "" && d.unnamedKinetic
	}
}

// terminal is the predicate of the message that completes a frontend
// message's answer (an ErrorResponse completes any of them).
func terminal(m pgproto3.FrontendMessage) func(pgproto3.BackendMessage) bool {
	switch m.(type) {
	case *pgproto3.Parse:
		return func(bm pgproto3.BackendMessage) bool { _, ok := bm.(*pgproto3.ParseComplete); return ok }
	case *pgproto3.Bind:
		return func(bm pgproto3.BackendMessage) bool { _, ok := bm.(*pgproto3.BindComplete); return ok }
	case *pgproto3.Describe:
		return func(bm pgproto3.BackendMessage) bool {
			switch bm.(type) {
			case *pgproto3.RowDescription, *pgproto3.NoData:
				return true
			}
			return false
		}
	case *pgproto3.Execute:
		return func(bm pgproto3.BackendMessage) bool {
			switch bm.(type) {
			case *pgproto3.CommandComplete, *pgproto3.PortalSuspended, *pgproto3.EmptyQueryResponse:
				return true
			}
			return false
		}
	case *pgproto3.Close:
		return func(bm pgproto3.BackendMessage) bool { _, ok := bm.(*pgproto3.CloseComplete); return ok }
	}
	return isRFQ
}

func isRFQ(bm pgproto3.BackendMessage) bool { _, ok := bm.(*pgproto3.ReadyForQuery); return ok }

func (d *driver) record(fe int, s string) { d.lines = append(d.lines, Line{FE: fe, S: s}) }

// readUntil records backend messages until done(msg) or, outside a Query
// or Sync, an ErrorResponse (after which the server skips to Sync).
func (d *driver) readUntil(toRFQ bool, done func(pgproto3.BackendMessage) bool) bool {
	for {
		bm, err := d.fe.Receive()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				d.record(d.fe0, fmt.Sprintf("%s%v>", hangPrefix, d.rn.Timeout))
				if os.Getenv("KINETIC_DIFF_HANGDUMP") != "" {
					buf := make([]byte, 1<<24)
					n := runtime.Stack(buf, true)
					os.WriteFile(fmt.Sprintf("%s.%d", os.Getenv("KINETIC_DIFF_HANGDUMP"), time.Now().UnixNano()), buf[:n], 0o644)
				}
			} else {
				d.record(d.fe0, closedPrefix+err.Error()+">")
			}
			return false
		}
		if ps, ok := bm.(*pgproto3.ParameterStatus); ok && strings.HasPrefix(ps.Name, "pg_kinetic.") {
			d.res.KineticStatus++
			if !d.betweenUnits {
				d.tokenInside = true
			}
			continue
		}
		switch bm.(type) {
		case *pgproto3.ReadyForQuery:
			d.betweenUnits, d.tokenInside = true, false
		case *pgproto3.ParameterStatus:
		default:
			d.betweenUnits = false
			if d.tokenInside {
				// (Recorded on this target only: a mismatch. lib/pq's
				// COPY loop fails at one: TestTokenNotInsideCopy.)
				d.record(d.fe0, fmt.Sprintf("<ParameterStatus pg_kinetic.* inside a response, before %T>", bm))
				d.tokenInside = false
			}
		}
		if rd, ok := bm.(*pgproto3.RowDescription); ok {
			d.kineticRows = len(rd.Fields) == 1 && strings.HasPrefix(string(rd.Fields[0].Name), "pg_kinetic.")
		}
		d.record(d.fe0, d.mask(d.rn.canon(bm, d.masked || d.kineticRows || d.execMask)))
		switch bm.(type) {
		case *pgproto3.CommandComplete, *pgproto3.ReadyForQuery:
			d.kineticRows = false
		}
		switch bm := bm.(type) {
		case *pgproto3.CopyInResponse:
			// COPY FROM STDIN: send the unit's data (or give up).
			data := d.copyData
			if len(data) == 0 {
				data = []pgproto3.FrontendMessage{&pgproto3.CopyFail{Message: "no copy data in this unit"}}
			}
			for _, m := range data {
				d.fe.Send(m)
			}
			if err := d.fe.Flush(); err != nil {
				d.record(d.fe0, closedPrefix+err.Error()+">")
				return false
			}
		case *pgproto3.ErrorResponse:
			if bm.Severity == "FATAL" || bm.Severity == "PANIC" {
				// The connection ends; read what is left (EOF).
				continue
			}
			if !toRFQ {
				d.skipping = true
				return true
			}
		}
		if done(bm) {
			return true
		}
	}
}

// canon is a backend message in canonical form: its type and the fields
// that must match, with what legitimately differs masked.
func (rn *Runner) canon(m pgproto3.BackendMessage, maskRows bool) string {
	switch m := m.(type) {
	case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.CloseComplete, *pgproto3.NoData,
		*pgproto3.EmptyQueryResponse, *pgproto3.PortalSuspended, *pgproto3.CopyDone:
		return strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
	case *pgproto3.ReadyForQuery:
		return "ReadyForQuery " + string(m.TxStatus)
	case *pgproto3.CommandComplete:
		return fmt.Sprintf("CommandComplete %q", m.CommandTag)
	case *pgproto3.DataRow:
		if maskRows {
			return fmt.Sprintf("DataRow <%d values masked>", len(m.Values))
		}
		vs := make([]string, len(m.Values))
		for i, v := range m.Values {
			if v == nil {
				vs[i] = "NULL"
			} else {
				vs[i] = strconv.Quote(string(v))
			}
		}
		return "DataRow [" + strings.Join(vs, " ") + "]"
	case *pgproto3.RowDescription:
		fs := make([]string, len(m.Fields))
		for i, f := range m.Fields {
			tbl := "-"
			if f.TableOID != 0 {
				tbl = rn.KnownTables[f.TableOID]
				if tbl == "" {
					tbl = "table?" // a table made by the sequence: its OID differs per run
				}
				tbl += "." + strconv.Itoa(int(f.TableAttributeNumber))
			}
			fs[i] = fmt.Sprintf("%s:%d/%d/%d/f%d@%s", f.Name, f.DataTypeOID, f.DataTypeSize, f.TypeModifier, f.Format, tbl)
		}
		return "RowDescription [" + strings.Join(fs, " ") + "]"
	case *pgproto3.ParameterDescription:
		return fmt.Sprintf("ParameterDescription %v", m.ParameterOIDs)
	case *pgproto3.ErrorResponse:
		// Compared by severity, SQLSTATE and message, not by File/Line/
		// Routine/Position (kineticd's own errors have none).
		msg := m.Message
		if m.Code == readOnlyCode {
			// A write refused in a read-only transaction: a replica words
			// it "cannot execute COPY during recovery" where the primary
			// says "... in a read-only transaction" (see doc.go).
			msg = "<read-only: message masked>"
		}
		return fmt.Sprintf("ErrorResponse %s %s %q", m.Severity, m.Code, msg)
	case *pgproto3.NoticeResponse:
		return fmt.Sprintf("NoticeResponse %s %s %q", m.Severity, m.Code, m.Message)
	case *pgproto3.ParameterStatus:
		v := m.Value
		if rn.MaskedParams[m.Name] {
			v = "<masked>"
		}
		return "ParameterStatus " + m.Name + "=" + v
	case *pgproto3.CopyOutResponse:
		return fmt.Sprintf("CopyOutResponse format=%d columns=%v", m.OverallFormat, m.ColumnFormatCodes)
	case *pgproto3.CopyInResponse:
		return fmt.Sprintf("CopyInResponse format=%d columns=%v", m.OverallFormat, m.ColumnFormatCodes)
	case *pgproto3.CopyData:
		return fmt.Sprintf("CopyData %q", m.Data)
	case *pgproto3.NotificationResponse:
		return fmt.Sprintf("NotificationResponse channel=%q payload=%q", m.Channel, m.Payload) // PID masked
	case *pgproto3.BackendKeyData:
		return "BackendKeyData <masked>"
	}
	return fmt.Sprintf("%T", m)
}
