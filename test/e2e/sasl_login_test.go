package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// saslPasswords are SCRAM passwords that PostgreSQL's SASLprep
// (src/common/saslprep.c) changes or refuses (then the raw bytes are
// hashed). libpq does the same as the server, so each works with psql.
var saslPasswords = []struct {
	role, password, why string
}{
	{"sasl_roman", "pass\u2168word", "U+2168 ROMAN NUMERAL NINE: NFKC gives IX (pgx keeps it: NFC)"},
	{"sasl_nbsp", "pass\u00a0word", "U+00A0 NO-BREAK SPACE maps to a space"},
	{"sasl_fullwidth", "\uff50\uff41\uff53\uff53\uff17", "fullwidth letters: NFKC gives ASCII (pgx keeps them: NFC)"},
	{"sasl_zwsp", "pa\u200bss-word", "U+200B maps to a space in PostgreSQL (C.1.2 before B.1), to nothing in textbook SASLprep"},
	{"sasl_u0340", "pa\u0340ss-word", "U+0340 is prohibited before normalisation in PostgreSQL: the raw password is hashed"},
	{"sasl_bidi", "\u05d0ae\u0301\u05d1", "fails the bidi rule: the raw password, not its NFC form (pgx: NFC)"},
	{"sasl_emoji", "pw\U0001F600-word", "unassigned in Unicode 3.2: the raw password"},
	{"sasl_shy", "\u00ad", "maps to nothing: the raw password (textbook SASLprep: the empty string)"},
}

// TestServerLoginSASLprep: a password that works directly works through
// kineticd. Roles with the passwords above are made on the primary
// (scram-sha-256 in pg_hba.conf, password_encryption = scram-sha-256).
//
//   - server login: a [[users]] entry with an ASCII client password and
//     the role's password as backend_password, so only kineticd's own login
//     to the server is tested. Before kineticd did that login itself, pgconn
//     normalised the password with PRECIS (NFC) and the server answered
//     28P01 for sasl_roman, sasl_fullwidth, sasl_zwsp, sasl_u0340 and
//     sasl_bidi.
//   - end to end: a [[users]] entry with the role's plaintext password;
//     psql (libpq, PostgreSQL's SASLprep) must log in through kineticd as
//     it does directly, and pgx must get through kineticd exactly what it
//     gets directly (it fails directly for passwords its NFC changes).
//     Before kineticd derived the client's SCRAM credentials from a
//     plaintext secret with pool.SCRAMPassword, it used xdg-go's textbook
//     SASLprep and psql failed with 28P01 for sasl_zwsp, sasl_u0340 and
//     sasl_shy.
//   - stored verifier: a [[users]] entry whose secret is the verifier
//     PostgreSQL stored for the role (no SASLprep on kineticd's side at
//     all); psql logs in with the role's password.
func TestServerLoginSASLprep(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 120*time.Second)
	var extra strings.Builder
	for _, p := range saslPasswords {
		if err := cl.Primary.Exec(ctx, fmt.Sprintf("create role %s login password %s", p.role, sqlQuote(p.password))); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop role if exists "+p.role) })
		fmt.Fprintf(&extra, "\n[[users]]\nname = %q\npassword = \"client-secret\"\nbackend_user = %q\nbackend_password = %s\n",
			p.role+"_via", p.role, tomlString(p.password))
		fmt.Fprintf(&extra, "\n[[users]]\nname = %q\npassword = %s\n", p.role, tomlString(p.password))
		verifier, err := cl.Primary.QueryString(ctx, "select rolpassword from pg_authid where rolname = "+sqlQuote(p.role))
		if err != nil || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
			t.Fatalf("%s's verifier: %q, %v", p.role, verifier, err)
		}
		fmt.Fprintf(&extra, "\n[[users]]\nname = %q\npassword = %q\nbackend_user = %q\nbackend_password = %s\n",
			p.role+"_verifier", verifier, p.role, tomlString(p.password))
	}
	px := kinetictest.Start(t, cl, kinetictest.Params{Extra: extra.String()})

	for _, p := range saslPasswords {
		t.Run(p.role, func(t *testing.T) {
			t.Logf("%+q: %s", p.password, p.why)
			env := clientEnv("PGPASSWORD=" + p.password)
			conninfo := func(port int, user string) string {
				return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable gssencmode=disable", port, user, pgtest.AppDB)
			}
			if r := psql(t, ctx, conninfo(cl.Primary.Port, p.role), env, nil, "-Atc", "select current_user"); r.code != 0 || strings.TrimSpace(r.stdout) != p.role {
				t.Fatalf("psql directly: %s", r)
			}

			t.Run("server login", func(t *testing.T) {
				c, err := pgx.Connect(ctx, px.DSN(p.role+"_via", "client-secret", pgtest.AppDB))
				if err != nil {
					t.Fatalf("through kineticd (backend_password %+q): %v", p.password, err)
				}
				defer c.Close(ctx)
				if got := queryString(t, ctx, c, "select current_user"); got != p.role {
					t.Fatalf("current_user = %q, want %q", got, p.role)
				}
			})

			t.Run("end to end", func(t *testing.T) {
				r := psql(t, ctx, conninfo(px.Port(), p.role), env, nil, "-Atc", "select current_user")
				if r.code != 0 || strings.TrimSpace(r.stdout) != p.role {
					t.Fatalf("psql works directly but not through kineticd:\n%s", r)
				}
				direct, derr := pgx.Connect(ctx, cl.Primary.DSN(p.role, p.password, pgtest.AppDB))
				if derr == nil {
					direct.Close(ctx)
				}
				via, verr := pgx.Connect(ctx, px.DSN(p.role, p.password, pgtest.AppDB))
				if verr == nil {
					via.Close(ctx)
				}
				if (derr == nil) != (verr == nil) {
					t.Fatalf("pgx directly: %v; through kineticd: %v", derr, verr)
				}
				if derr != nil && pgCode(derr) != "28P01" {
					t.Fatalf("pgx directly: %v, want 28P01 or success", derr)
				}
				if verr != nil && pgCode(verr) != "28P01" {
					t.Fatalf("pgx through kineticd: %v, want 28P01 like directly", verr)
				}
			})

			t.Run("stored verifier", func(t *testing.T) {
				r := psql(t, ctx, conninfo(px.Port(), p.role+"_verifier"), env, nil, "-Atc", "select current_user")
				if r.code != 0 || strings.TrimSpace(r.stdout) != p.role {
					t.Fatalf("psql with the role's verifier as the [[users]] secret:\n%s", r)
				}
			})
		})
	}
}

// TestServerLoginMD5RawPassword: md5 hashes the password's raw bytes, never
// SASLprepped. On a server of its own (md5user's password changes).
func TestServerLoginMD5RawPassword(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	ctx := ctxT(t, 60*time.Second)
	const password = "md5-pass\u2168\u00a0word"
	if err := cl.Primary.Exec(ctx, "set password_encryption = 'md5'; alter role "+pgtest.MD5User+" password "+sqlQuote(password)); err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf("\n[[users]]\nname = \"md5via\"\npassword = \"client-secret\"\nbackend_user = %q\nbackend_password = %s\n",
		pgtest.MD5User, tomlString(password))
	px := kinetictest.Start(t, cl, kinetictest.Params{Extra: extra})
	c, err := pgx.Connect(ctx, px.DSN("md5via", "client-secret", pgtest.AppDB))
	if err != nil {
		t.Fatalf("md5 server login with %+q: %v", password, err)
	}
	defer c.Close(ctx)
	if got := queryString(t, ctx, c, "select current_user"); got != pgtest.MD5User {
		t.Fatalf("current_user = %q", got)
	}
}

func queryString(t *testing.T, ctx context.Context, c *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func sqlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tomlString is s as a TOML basic string, every non-ASCII or control
// character escaped (\uXXXX, \UXXXXXXXX), so no editor or terminal can
// change what the file says.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0xffff):
			fmt.Fprintf(&b, "\\u%04X", r)
		case r > 0xffff:
			fmt.Fprintf(&b, "\\U%08X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestCatalogLookupSASLprepBackendPassword: with read routing on, a
// function the classifier does not know is looked up in the primary's
// pg_proc on a connection logged in with the session's backend
// credentials. That login goes through pool.Dialer like the session's own,
// so a backend password that needs PostgreSQL's SASLprep works there too:
// a STABLE function's read goes to a replica, a VOLATILE one to the
// primary. Through pgconn (PRECIS, NFC) the lookup's login failed with
// 28P01, every such function counted as volatile, and the STABLE read
// stayed on the primary.
func TestCatalogLookupSASLprepBackendPassword(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	const role, password = "sasl_catalog", "pass\u2168word"
	vol, stab := uniqueIdent("sasl_vol_fn"), uniqueIdent("sasl_stable_fn")
	if err := cl.Primary.Exec(ctx, "create role "+role+" login password "+sqlQuote(password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop role if exists "+role) })
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	for _, q := range []string{
		"create function " + vol + "() returns int language sql volatile as 'select inet_server_port()'",
		"create function " + stab + "() returns int language sql stable as 'select inet_server_port()'",
	} {
		if _, err := direct.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		direct.Exec(context.Background(), "drop function if exists "+vol+"(); drop function if exists "+stab+"()")
	})
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	// fallback_policy "wait": the volatile call's read on the primary
	// raises the session's floor to the primary's position; a replica a
	// moment behind (other tests write to the shared cluster) then catches
	// up instead of the primary answering the STABLE read.
	p := kinetictest.Params{ReadRoutingMode: "prefer_replica", FallbackPolicy: "wait", Extra: fmt.Sprintf(
		"\n[[users]]\nname = \"sasl_catalog_via\"\npassword = \"client-secret\"\nbackend_user = %q\nbackend_password = %s\n", role, tomlString(password))}
	for _, s := range cl.Standbys {
		p.Replicas = append(p.Replicas, s.Addr())
	}
	px := kinetictest.Start(t, cl, p)
	c, err := pgx.Connect(ctx, px.DSN("sasl_catalog_via", "client-secret", pgtest.AppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	reps := cl.StandbyPorts()
	port := func(sql string) int {
		t.Helper()
		var p int
		if err := c.QueryRow(ctx, sql).Scan(&p); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return p
	}
	// Until the replicas' first verdicts are in, reads go to the primary.
	deadline := time.Now().Add(20 * time.Second)
	for !reps[port("select "+stab+"()")] {
		if time.Now().After(deadline) {
			t.Fatalf("the STABLE function's read never reached a replica (the volatility lookup fails, or no replica verdict); last route: %s", lastRoute(t, ctx, c))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		if p := port("select " + vol + "()"); p != cl.Primary.Port {
			t.Fatalf("volatile function ran on %d, want the primary %d", p, cl.Primary.Port)
		}
		if p := port("select " + stab + "()"); !reps[p] {
			t.Fatalf("stable function ran on %d, want a replica", p)
		}
	}
}
