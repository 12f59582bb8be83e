package config

import "testing"

// TestAuthQueryKeys: auth_user must name a [[users]] entry, auth_query must
// bind $1, auth_cache_ttl_ms is >= 0; each problem names its file, line
// and key. Omitted keys take SPEC §2's auth_query and a 60 s TTL.
func TestAuthQueryKeys(t *testing.T) {
	route := func(lines ...string) string {
		return doc(append(append(append([]string{}, usersTail...),
			"[[routes]]", `name = "main"`, `database = "app"`), append(lines, "[routes.primary]", `address = "127.0.0.1:5432"`)...)...)
	}
	_, err := Parse(testFile, []byte(route(`auth_user = "nobody"`, `auth_query = "SELECT usename, passwd FROM pg_shadow WHERE usename = 'x'"`, "auth_cache_ttl_ms = -1")))
	checkProblems(t, err, []want{
		{7, "routes[0].auth_user", `"nobody" is not a [[users]] name`},
		{8, "routes[0].auth_query", "must use $1"},
		{9, "routes[0].auth_cache_ttl_ms", "must be at least 0"},
	})
	_, err = Parse(testFile, []byte(route(`auth_user = "app"`, `auth_query = "  "`)))
	checkProblems(t, err, []want{{8, "routes[0].auth_query", "required when auth_user is set"}})

	c := mustParse(t, route())
	if r := c.Routes[0]; r.AuthUser != "" || r.AuthQuery != "SELECT usename, passwd FROM pg_shadow WHERE usename = $1" || r.AuthCacheTTLMS != 60000 {
		t.Fatalf("defaults: auth_user %q auth_query %q auth_cache_ttl_ms %d", r.AuthUser, r.AuthQuery, r.AuthCacheTTLMS)
	}
	c = mustParse(t, route(`auth_user = "app"`, `auth_query = "SELECT * FROM pgkinetic.user_lookup($1)"`, "auth_cache_ttl_ms = 0"))
	if r := c.Routes[0]; r.AuthUser != "app" || r.AuthQuery != "SELECT * FROM pgkinetic.user_lookup($1)" || r.AuthCacheTTL() != 0 {
		t.Fatalf("explicit: %+v", r)
	}
}
