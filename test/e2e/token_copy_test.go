package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestTokenNotInsideCopy: the ParameterStatus pg_kinetic.write_lsn of a
// write reaches the client either while it is idle or just before a
// ReadyForQuery, as PostgreSQL reports parameters, never between a
// CopyInResponse and the COPY's CommandComplete. lib/pq reads a COPY FROM
// STDIN's answers in a loop of its own and fails at a ParameterStatus
// there ("unknown response during CopyIn": its Example_copyFromStdin,
// through kineticd with routing on, on a loaded machine). Here the write's
// position is read in no hurry (the session has read nothing from a
// replica: up to 10 ms) and the COPY that follows at once waits 50 ms for
// its data, so the token arrives while the COPY is open. Before the fix
// it went to the client there, in every round.
func TestTokenNotInsideCopy(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	px := routedProxy(t, cl, kinetictest.Params{})
	tbl := uniqueIdent("tokcopy")
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (k int)"); err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	held := 0
	for run := 0; run < rounds; run++ {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Query{String: fmt.Sprintf("insert into %s values (%d)", tbl, run)})
		if got := rc.expect(2); got != "C:INSERT 0 1 Z:I" {
			t.Fatalf("run %d: INSERT: %s", run, got)
		}
		rc.send(&pgproto3.Query{String: "copy " + tbl + " (k) from stdin"})
		// The token may come before the CopyInResponse (the client is
		// idle until the proxy has the COPY), never after it.
		got := rc.expectParams(1, true)
		for strings.HasPrefix(got, "S:") {
			got = rc.expectParams(1, true)
		}
		if got != "CopyInResponse" {
			t.Fatalf("run %d: COPY: %s", run, got)
		}
		time.Sleep(50 * time.Millisecond)
		rc.send(&pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\n", run))}, &pgproto3.CopyDone{})
		var answer []string
		for len(answer) == 0 || !strings.HasPrefix(answer[len(answer)-1], "Z:") {
			answer = append(answer, rc.expectParams(1, true))
		}
		all := strings.Join(answer, " ")
		// Before the ReadyForQuery only: C:COPY 1 [S:…] Z:I.
		if answer[0] != "C:COPY 1" {
			t.Fatalf("run %d: a message between the CopyInResponse and the COPY's CommandComplete: %s", run, all)
		}
		if len(answer) == 3 && strings.HasPrefix(answer[1], "S:pg_kinetic.write_lsn=") {
			held++
		} else if len(answer) != 2 {
			t.Fatalf("run %d: the COPY's answer: %s", run, all)
		}
		rc.close()
	}
	// (The test is worth something only when the token did arrive while
	// the COPY was open; on an idle machine it does in every round.)
	if held == 0 {
		t.Fatalf("in none of %d rounds did the INSERT's token arrive during the COPY", rounds)
	}
	t.Logf("the INSERT's token arrived during the COPY, and went out before its ReadyForQuery, in %d of %d rounds", held, rounds)
}
