package pool_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/pool"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Query and QuoteLiteral against PostgreSQL 15: rows come back as the
// server's text, NULL as nil; a literal reads back as the string it was
// made of with standard_conforming_strings on and off; a server error
// leaves the connection usable.
func TestQueryAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pool.Dialer{}.Dial(ctx, cl.Primary.Addr(), pool.Credentials{User: pgtest.AppUser, Password: pgtest.AppPassword, Database: pgtest.AppDB})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(time.Second)

	rows, err := c.Query(ctx, "select 1, null::text, '', 'pass\u2168' union all select 2, 'x', 'y', 'z' order by 1")
	if err != nil {
		t.Fatal(err)
	}
	want := [][][]byte{{[]byte("1"), nil, {}, []byte("pass\u2168")}, {[]byte("2"), []byte("x"), []byte("y"), []byte("z")}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}

	if _, err := c.Query(ctx, "select nope"); err == nil || c.Broken() {
		t.Fatalf("select nope: %v, broken %v; want a server error on a usable connection", err, c.Broken())
	}

	tricky := []string{`plain`, `it's`, `back\slash`, `\'; select 1; --`, `'\\''`, `{"a\"b","c\\d"}`, "tab\there", `é`}
	for _, scs := range []string{"on", "off"} {
		if _, err := c.Query(ctx, "set standard_conforming_strings = "+scs+"; set escape_string_warning = off"); err != nil {
			t.Fatal(err)
		}
		for _, s := range tricky {
			rows, err := c.Query(ctx, "select "+pool.QuoteLiteral(s))
			if err != nil {
				t.Fatalf("standard_conforming_strings=%s: %s: %v", scs, pool.QuoteLiteral(s), err)
			}
			if len(rows) != 1 || string(rows[0][0]) != s {
				t.Fatalf("standard_conforming_strings=%s: %s read back as %q, want %q", scs, pool.QuoteLiteral(s), rows, s)
			}
		}
	}
	// A text[] literal inside a quoted literal, as the volatility lookup
	// sends it.
	rows, err = c.Query(ctx, "select n from unnest("+pool.QuoteLiteral(`{"f\"1","g\\2"}`)+"::text[]) n order by 1")
	if err != nil || len(rows) != 2 || string(rows[0][0]) != `f"1` || string(rows[1][0]) != `g\2` {
		t.Fatalf("array literal: %q, %v", rows, err)
	}
}

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{
		`f`:          `'f'`,
		`it's`:       `'it''s'`,
		`a\b`:        `E'a\\b'`,
		`\'`:         `E'\\'''`,
		``:           `''`,
		`{"f"}`:      `'{"f"}'`,
		"pass\u2168": "'pass\u2168'",
	} {
		if got := pool.QuoteLiteral(in); got != want {
			t.Errorf("QuoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}
