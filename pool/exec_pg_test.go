package pool_test

import (
	"context"
	"reflect"
	"strconv"
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

// QueryParams against PostgreSQL 15: $1 is bound as text, never part of
// the statement's text (a value full of quotes and a semicolon comes back
// as itself); NULL is nil; a server error (two statements in one Parse, a
// wrong parameter count) leaves the connection usable.
func TestQueryParamsAgainstPostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pool.Dialer{}.Dial(ctx, cl.Primary.Addr(), pool.Credentials{User: pgtest.AppUser, Password: pgtest.AppPassword, Database: pgtest.AppDB})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(time.Second)
	for _, v := range []string{"app", `x'; select 1; --`, `back\slash "q"`, "pass\u2168", ""} {
		rows, err := c.QueryParams(ctx, "select $1::text, length($1::text), null::text", v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		want := [][][]byte{{[]byte(v), []byte(strconv.Itoa(len([]rune(v)))), nil}}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("%q: rows %q, want %q", v, rows, want)
		}
	}
	rows, err := c.QueryParams(ctx, "select usename from pg_user where usename = $1", "app")
	if err != nil || len(rows) != 1 || string(rows[0][0]) != "app" {
		t.Fatalf("pg_user lookup: %q, %v", rows, err)
	}
	if rows, err := c.QueryParams(ctx, "select usename from pg_user where usename = $1", "app' or 'a' = 'a"); err != nil || len(rows) != 0 {
		t.Fatalf("injection attempt: %q, %v; want no rows", rows, err)
	}
	for _, bad := range []struct {
		sql  string
		args []string
	}{
		{"select $1::text; select 2", []string{"a"}},
		{"select 1", []string{"a"}},
		{"select $1::int", []string{"not a number"}},
	} {
		if _, err := c.QueryParams(ctx, bad.sql, bad.args...); err == nil || c.Broken() {
			t.Fatalf("%q %q: %v, broken %v; want a server error on a usable connection", bad.sql, bad.args, err, c.Broken())
		}
	}
	if rows, err := c.QueryParams(ctx, "select $1::int + 1", "41"); err != nil || len(rows) != 1 || string(rows[0][0]) != "42" {
		t.Fatalf("after the errors: %q, %v", rows, err)
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
