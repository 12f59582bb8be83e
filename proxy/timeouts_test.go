package proxy

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/config"
)

func TestJanitorPeriod(t *testing.T) {
	for _, tc := range []struct {
		idle, lifetime, query, idleTx, clientIdle int
		want                                      time.Duration
	}{
		{600000, 3600000, 0, 0, 0, time.Second},                 // the defaults: once a second
		{0, 0, 0, 0, 0, time.Second},                            // nothing to time: still once a second
		{600000, 3600000, 300, 0, 0, 75 * time.Millisecond},     // a quarter of the shortest
		{600000, 3600000, 0, 2000, 400, 100 * time.Millisecond}, // client timeouts count
		{20, 0, 0, 0, 0, 10 * time.Millisecond},                 // never below 10 ms
	} {
		cfg := &config.Config{Server: config.Server{ServerIdleTimeoutMS: tc.idle, ServerLifetimeMS: tc.lifetime,
			QueryTimeoutMS: tc.query, IdleTransactionTimeoutMS: tc.idleTx, ClientIdleTimeoutMS: tc.clientIdle}}
		if got := janitorPeriod(cfg); got != tc.want {
			t.Errorf("%+v: period %v, want %v", tc, got, tc.want)
		}
	}
}

func TestQueryTimeoutError(t *testing.T) {
	ss := &session{cfg: &config.Config{Server: config.Server{QueryTimeoutMS: 1500}}}
	body := func(e *pgproto3.ErrorResponse) []byte {
		b, err := e.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b[5:]
	}
	canceled := body(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "57014",
		Message: "canceling statement due to user request", Routine: "ProcessInterrupts"})
	var got pgproto3.ErrorResponse
	if err := got.Decode(ss.queryTimeoutError(canceled)); err != nil {
		t.Fatal(err)
	}
	if got.Code != "57014" || got.Severity != "ERROR" || got.Message != "canceling statement due to statement timeout" ||
		got.Detail != "pg-kinetic: the statement ran longer than query_timeout_ms (1500 ms) and was cancelled on the server" ||
		got.Routine != "ProcessInterrupts" {
		t.Errorf("rewritten: %+v", got)
	}
	other := body(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22012", Message: "division by zero"})
	if out := ss.queryTimeoutError(other); string(out) != string(other) {
		t.Errorf("another error was rewritten")
	}
	if out := ss.queryTimeoutError([]byte("junk")); string(out) != "junk" {
		t.Errorf("an undecodable body was rewritten")
	}
}
