package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
)

// TestReplayLogOpen: what a replica part's log replays on the primary is
// the last Bind of each portal still open and the Executes of it since.
func TestReplayLogOpen(t *testing.T) {
	body := func(m interface{ Encode([]byte) ([]byte, error) }) (byte, []byte) {
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b[0], b[5:]
	}
	bind := func(portal, stmt string) *pgproto3.Bind {
		return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt}
	}
	exec := func(portal string, n uint32) *pgproto3.Execute { return &pgproto3.Execute{Portal: portal, MaxRows: n} }
	closeP := func(portal string) *pgproto3.Close { return &pgproto3.Close{ObjectType: 'P', Name: portal} }
	parse := func(name, q string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: q} }
	type enc = interface{ Encode([]byte) ([]byte, error) }
	for _, tc := range []struct {
		name string
		msgs []enc
		want []string // "B:portal" / "E:portal"
	}{
		{"one suspended portal", []enc{parse("", "select 1"), bind("p", ""), exec("p", 5), exec("p", 5)}, []string{"B:p", "E:p", "E:p"}},
		{"closed portal", []enc{bind("p", "s"), exec("p", 0), closeP("p")}, nil},
		{"closed then bound again", []enc{bind("p", "s"), exec("p", 1), closeP("p"), bind("p", "t")}, []string{"B:p"}},
		{"unnamed bound twice", []enc{bind("", "s"), exec("", 1), bind("", "t"), exec("", 2)}, []string{"B:", "E:"}},
		{"two portals", []enc{bind("a", "s"), bind("b", "t"), exec("a", 1), closeP("b"), exec("a", 1)}, []string{"B:a", "E:a", "E:a"}},
		{"execute of a portal never bound here", []enc{exec("x", 1)}, nil},
		{"a transaction's end destroys the portals before it", []enc{parse("", "begin read only"), bind("", ""), exec("", 0),
			bind("p", "s"), exec("p", 1), parse("", "rollback"), bind("q", ""), exec("q", 0), bind("r", "s")}, []string{"B:r"}},
		{"a transaction-control portal is not made again", []enc{bind("p", "s"), exec("p", 1), parse("", "savepoint a"), bind("", ""), exec("", 0),
			parse("", "begin"), bind("", ""), exec("", 0)}, []string{"B:p", "E:p"}},
		{"a Bind of the unnamed statement where there is none", []enc{bind("", ""), exec("", 0)}, []string{"B:", "E:"}},
		{"a COMMIT bound but not run ends nothing", []enc{bind("p", "s"), exec("p", 1), parse("c", "commit"), bind("q", "c")}, []string{"B:p", "E:p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplayLog("")
			r.txOf = testTxOf
			for _, m := range tc.msgs {
				r.add(body(m))
			}
			var got []string
			for _, m := range r.open() {
				p := portalName(m)
				got = append(got, string(m.typ)+":"+p)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("open() = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("unnamed statement at its Bind", func(t *testing.T) {
		r := newReplayLog("\x00before\x00\x00\x00")
		r.add(body(bind("p", "")))
		r.add(body(parse("", "after")))
		r.add(body(bind("q", "")))
		got := r.open()
		if len(got) != 2 || got[0].unnamed != "\x00before\x00\x00\x00" || got[1].unnamed == got[0].unnamed {
			t.Errorf("Binds of the unnamed statement recorded %q", []string{got[0].unnamed, got[1].unnamed})
		}
	})
	t.Run("a named statement's text at its Bind", func(t *testing.T) {
		// s1 Parsed in the part, t prepared before it; both Closed after
		// their Binds, then s1 Parsed again: each Bind keeps the text
		// it used, so its portal can be bound again from the unnamed
		// statement (replayPortals). A Bind of a name Closed before it
		// and not Parsed again has none.
		r := newReplayLog("")
		r.stmtParse = func(name string) string {
			if name == "t" {
				return "t\x00select 't'\x00\x00\x00"
			}
			return ""
		}
		_, s1 := body(parse("s1", "select 1"))
		r.add(body(parse("s1", "select 1")))
		r.add(body(bind("p", "s1")))
		r.add(body(bind("q", "t")))
		r.add(body(&pgproto3.Close{ObjectType: 'S', Name: "s1"}))
		r.add(body(&pgproto3.Close{ObjectType: 'S', Name: "t"}))
		r.add(body(bind("x", "t")))
		r.add(body(parse("s1", "select 2")))
		r.add(body(bind("y", "s1")))
		got := r.open()
		if len(got) != 4 || got[0].parse != string(s1) || got[1].parse != "t\x00select 't'\x00\x00\x00" || got[2].parse != "" ||
			queryOf(got[3].parse) != "select 2" {
			t.Fatalf("Parse bodies at the Binds: %q", []string{got[0].parse, got[1].parse, got[2].parse, got[3].parse})
		}
		if u := unnamedParse(got[0].parse); u != "\x00select 1\x00\x00\x00" {
			t.Errorf("unnamedParse = %q", u)
		}
		_, want := body(bind("p", ""))
		if b := unnamedBind(got[0].body); string(b) != string(want) {
			t.Errorf("unnamedBind = %q, want %q", b, want)
		}
	})
	t.Run("over budget", func(t *testing.T) {
		r := newReplayLog("")
		big := make([][]byte, 1)
		big[0] = make([]byte, replayBudget)
		r.add(body(&pgproto3.Bind{DestinationPortal: "p", Parameters: big}))
		if got := r.open(); got != nil {
			t.Errorf("open() over budget = %d messages, want none", len(got))
		}
	})
}

func portalName(m replayMsg) string {
	name, _, _ := cstring(m.body)
	return name
}

// testTxOf is txOf without a classifier, for the texts of these tests.
func testTxOf(query string) classify.Tx {
	switch strings.Fields(query)[0] {
	case "begin":
		return classify.TxBegin
	case "commit", "rollback":
		return classify.TxEnd
	case "savepoint":
		return classify.TxSavepoint
	}
	return classify.TxNone
}

// TestCommittedLast: the replica part's settings hold after the unit
// fails only if a COMMIT or a ROLLBACK of the unit followed each of its
// SETs (kept, or undone: either way settled before the rest).
func TestCommittedLast(t *testing.T) {
	set := effect{kind: classify.EffectSet, seq: 7}
	commit := effect{commit: true, seq: 7}
	rollback := effect{rollback: true, seq: 7}
	other := effect{commit: true, seq: 6}
	for _, tc := range []struct {
		name string
		e    []effect
		want bool
	}{
		{"SET alone", []effect{set}, false},
		{"SET then COMMIT", []effect{set, commit}, true},
		{"SET, COMMIT, SET", []effect{set, commit, set}, false},
		{"SET, COMMIT, ROLLBACK", []effect{set, commit, rollback}, true},
		{"a COMMIT of another unit", []effect{other, set}, false},
		{"ROLLBACK alone (a block of earlier units)", []effect{rollback}, true},
		{"SET then ROLLBACK", []effect{set, rollback}, true},
		{"ROLLBACK then SET", []effect{rollback, set}, false},
	} {
		if got := committedLast(tc.e, 7); got != tc.want {
			t.Errorf("%s: committedLast = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestKeptEffects: a ROLLBACK undoes the SETs since the last COMMIT
// before it; what follows it holds. A ROLLBACK TO SAVEPOINT undoes those
// since the savepoint (PostgreSQL: BEGIN; SET a; SAVEPOINT s; SET b;
// ROLLBACK TO s; COMMIT keeps a only), a RELEASE keeps them; a savepoint
// command whose unit failed is uncertain unless it was the unit's only
// statement.
func TestKeptEffects(t *testing.T) {
	set := func(name string) effect {
		return effect{kind: classify.EffectSet, setting: classify.Setting{Name: name}}
	}
	sp := func(op classify.SavepointOp, name string) effect {
		return effect{savepoint: classify.Savepoint{Op: op, Name: name}, alone: true}
	}
	save := func(name string) effect { return sp(classify.SavepointSet, name) }
	release := func(name string) effect { return sp(classify.SavepointRelease, name) }
	rollbackTo := func(name string) effect { return sp(classify.SavepointRollback, name) }
	failed := func(e effect) effect { e.errored = true; return e }
	inBatch := func(e effect) effect { e.alone = false; return e }
	commit, rollback := effect{commit: true}, effect{rollback: true}
	names := func(es []effect) string {
		var out []string
		for _, e := range es {
			out = append(out, e.setting.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		in        []effect
		want      string
		uncertain bool
	}{
		{in: []effect{set("a"), rollback}, want: ""},
		{in: []effect{set("a"), commit, set("b"), rollback}, want: "a"},
		{in: []effect{set("a"), rollback, set("b")}, want: "b"},
		{in: []effect{set("a"), commit, rollback, set("b")}, want: "a,b"},
		{in: []effect{set("a"), set("b")}, want: "a,b"},
		// Savepoints.
		{in: []effect{save("s"), set("a"), rollbackTo("s"), commit}, want: ""},
		{in: []effect{set("a"), save("s"), set("b"), rollbackTo("s"), commit}, want: "a"},
		{in: []effect{set("a"), save("s"), set("b"), rollbackTo("s"), set("c"), commit}, want: "a,c"},
		{in: []effect{save("s"), set("a"), release("s"), commit}, want: "a"},
		{in: []effect{save("s"), save("t"), set("a"), release("t"), rollbackTo("s"), commit}, want: ""},
		{in: []effect{save("s"), set("a"), save("t"), set("b"), rollbackTo("t"), rollbackTo("s"), commit}, want: ""},
		{in: []effect{save("s"), set("a"), save("t"), set("b"), rollbackTo("t"), commit}, want: "a"},
		// The latest savepoint of a name is the one rolled back to.
		{in: []effect{save("s"), set("a"), save("s"), set("b"), rollbackTo("s"), commit}, want: "a"},
		// ROLLBACK TO keeps the savepoint: a second one goes back to it too.
		{in: []effect{save("s"), set("a"), rollbackTo("s"), set("b"), rollbackTo("s"), commit}, want: ""},
		// A block's savepoints end with it.
		{in: []effect{save("s"), commit, set("a"), rollbackTo("s")}, want: "a", uncertain: true},
		// A savepoint command that failed alone did nothing.
		{in: []effect{save("s"), set("a"), failed(release("s")), rollbackTo("s"), commit}, want: ""},
		{in: []effect{failed(save("s")), set("a"), commit}, want: "a"},
		// One that failed among other statements may have run or not.
		{in: []effect{save("s"), set("a"), failed(inBatch(release("s"))), rollbackTo("s"), commit}, want: "", uncertain: true},
		// A ROLLBACK TO of a savepoint never set.
		{in: []effect{set("a"), rollbackTo("s"), commit}, want: "a", uncertain: true},
	} {
		got, uncertain := keptEffects(tc.in)
		if names(got) != tc.want || uncertain != tc.uncertain {
			t.Errorf("keptEffects(%v) = %q, %v, want %q, %v", tc.in, names(got), uncertain, tc.want, tc.uncertain)
		}
	}
}

// TestSavepointsDropPortals: the portals made since a savepoint go with a
// ROLLBACK TO it (PostgreSQL's AtSubCleanup_Portals), the proxy's own and
// the names of the servers'; a RELEASE hands them to the savepoint below,
// so a ROLLBACK TO that one drops them; a name never set changes nothing.
func TestSavepointsDropPortals(t *testing.T) {
	ss := &session{log: zap.NewNop()}
	ss.mu.tx = 'T'
	ss.client.kportals = map[string]kportal{}
	ss.client.srvPortals = map[string]portalAge{}
	note := func(op classify.SavepointOp, name string) {
		ss.mu.Lock()
		ss.noteSavepointLocked(classify.Savepoint{Op: op, Name: name})
		ss.mu.Unlock()
	}
	bind := func(name string, local bool) {
		if local {
			ss.client.kportals[name] = kportal{portalAge: ss.portalAgeNow()}
		} else {
			ss.client.srvPortals[name] = ss.portalAgeNow()
		}
	}
	portals := func() string {
		var out []string
		for n := range ss.client.kportals {
			out = append(out, n)
		}
		for n := range ss.client.srvPortals {
			out = append(out, n+"@server")
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	bind("p0", true)
	note(classify.SavepointSet, "a")
	bind("p1", true)
	bind("s1", false)
	note(classify.SavepointSet, "b")
	bind("p2", true)
	note(classify.SavepointRollback, "nosuch")
	if got := portals(); got != "p0,p1,p2,s1@server" {
		t.Fatalf("after ROLLBACK TO a savepoint never set: %s", got)
	}
	note(classify.SavepointRollback, "b")
	if got := portals(); got != "p0,p1,s1@server" {
		t.Fatalf("after ROLLBACK TO b: %s", got)
	}
	bind("p3", true)
	note(classify.SavepointRelease, "b") // p3 now belongs to a's level
	note(classify.SavepointSet, "c")
	note(classify.SavepointRollback, "c") // made before c: stays
	if got := portals(); got != "p0,p1,p3,s1@server" {
		t.Fatalf("after RELEASE b, SAVEPOINT c, ROLLBACK TO c: %s", got)
	}
	note(classify.SavepointRollback, "a")
	if got := portals(); got != "p0" {
		t.Fatalf("after RELEASE b and ROLLBACK TO a: %s", got)
	}
	if len(ss.client.savepoints) != 1 || ss.client.savepoints[0].name != "a" {
		t.Fatalf("savepoints after ROLLBACK TO a = %v, want [a] (it stays)", ss.client.savepoints)
	}
	// In a block known to have failed a SAVEPOINT fails: not set.
	ss.mu.tx = 'E'
	note(classify.SavepointSet, "c")
	if len(ss.client.savepoints) != 1 {
		t.Fatalf("a SAVEPOINT in a failed block was set: %v", ss.client.savepoints)
	}
}
