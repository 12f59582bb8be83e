package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsersFile: users_file adds the [[users]] of a second file, relative to
// the config's directory; its problems name it and its own lines; a name in
// both files is a duplicate; a missing file is a problem of users_file.
func TestUsersFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	main := func(extra ...string) []byte {
		return []byte(withTail(append(append([]string{}, usersTail...), routesTail...), extra...))
	}

	users := write("users.toml", doc(`[[users]]`, `name = "reader"`, `password = "md50123456789abcdef0123456789abcdef"`))
	c, err := Parse(filepath.Join(dir, "k.toml"), main(`users_file = "users.toml"`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.UsersFile != users {
		t.Errorf("users_file = %q, want %q", c.UsersFile, users)
	}
	if _, ok := c.UserByName("reader"); !ok {
		t.Error("the users file's user is missing")
	}
	if _, ok := c.UserByName("app"); !ok {
		t.Error("the config file's user is missing")
	}

	// Only users in the file: the config file needs none of its own.
	c, err = Parse(filepath.Join(dir, "k.toml"), []byte(doc(append([]string{`users_file = "users.toml"`}, routesTail...)...)))
	if err != nil || len(c.Users) != 1 {
		t.Fatalf("only the file's users: %v, %d users", err, len(c.Users))
	}

	for _, tc := range []struct {
		name, users string
		want        []string // substrings of the problems, in order
	}{
		{"bad entry", doc(`[[users]]`, `name = "x"`, ``, `password = ""`, `auth = "nope"`),
			[]string{"users.toml:5: users[0].auth:"}},
		{"unknown key", doc(`[server]`, `listen = ":1"`),
			[]string{"users.toml:1: server: unknown"}},
		{"duplicate across files", doc(`[[users]]`, `name = "app"`, `password = "p"`),
			[]string{"users.toml:2: users[0].name: duplicate user name \"app\" (first at users[0].name, line"}},
		{"syntax", "[[users]\n", []string{"users.toml:2: toml: invalid TOML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write("users.toml", tc.users)
			_, err := Parse(filepath.Join(dir, "k.toml"), main(`users_file = "users.toml"`))
			probs := problems(t, err)
			if len(probs) != len(tc.want) {
				t.Fatalf("problems:\n%v\nwant %d", err, len(tc.want))
			}
			for i, w := range tc.want {
				if got := probs[i].String(); !strings.Contains(got, w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got, w)
				}
			}
		})
	}

	_, err = Parse(filepath.Join(dir, "k.toml"), main(`users_file = "missing.toml"`))
	probs := problems(t, err)
	if len(probs) != 1 || probs[0].Key != "users_file" || probs[0].Line != 1 || !strings.Contains(probs[0].Msg, "cannot read the users file") {
		t.Errorf("a missing users file: %v", err)
	}
}

// TestUsersFileAdminAndAuthUser: an admin or a route's auth_user may be a
// user of the users file.
func TestUsersFileAdminAndAuthUser(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "users.toml"), []byte(doc(`[[users]]`, `name = "boss"`, `password = "p"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	text := doc(append([]string{`users_file = "users.toml"`, `[admin]`, `users = ["boss"]`},
		append(append([]string{}, usersTail...), append(append([]string{}, routesTail[:3]...), `auth_user = "boss"`, routesTail[3], routesTail[4])...)...)...)
	if _, err := Parse(filepath.Join(dir, "k.toml"), []byte(text)); err != nil {
		t.Fatalf("Parse:\n%v\n%s", err, text)
	}
}
