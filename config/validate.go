package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxInt is the upper bound of every integer key except
// max_replica_lag_bytes: about 24.8 days in milliseconds, far above any
// sensible setting and far below overflowing time.Duration arithmetic such as
// 2*interval + timeout.
const maxInt = math.MaxInt32

// validate checks cfg after decoding and reports through d. It also resolves
// relative file paths against the config file's directory, in place.
func validate(d *decoder, cfg *Config, uf *usersFile) {
	v := &validator{decoder: d, cfg: cfg, uf: uf}
	if cfg.Path != "" {
		v.dir = filepath.Dir(cfg.Path)
	}
	v.server()
	v.admin()
	v.metricsAndLog()
	v.users()
	v.routes()
	v.rollout()
}

type validator struct {
	*decoder
	cfg *Config
	dir string
	uf  *usersFile // users_file's entries, checked with its own lines
}

func keys(names ...string) path {
	var p path
	for _, n := range names {
		p = p.key(n)
	}
	return p
}

func (p path) keys(names ...string) path {
	for _, n := range names {
		p = p.key(n)
	}
	return p
}

func (v *validator) oneOf(p path, val string, allowed ...string) bool {
	for _, a := range allowed {
		if val == a {
			return true
		}
	}
	words := make([]string, len(allowed))
	for i, a := range allowed {
		words[i] = strconv.Quote(a)
	}
	v.problem(p, "unknown value %q; want one of %s", val, strings.Join(words, ", "))
	return false
}

func (v *validator) intRange(p path, n, lo, hi int64) bool {
	switch {
	case n < lo:
		v.problem(p, "must be at least %d (got %d)", lo, n)
		return false
	case n > hi:
		v.problem(p, "must be at most %d (got %d)", hi, n)
		return false
	}
	return true
}

func (v *validator) required(p path, val string) bool {
	if val == "" {
		v.problem(p, "required")
		return false
	}
	return true
}

// address checks a host:port. listen addresses may have an empty host (all
// interfaces) and port 0 (any free port); server addresses may not. It
// returns the normalized form (see normalizeAddress) and whether it is valid.
func (v *validator) address(p path, addr string, listen bool) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		cause := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			cause = ae.Err
		}
		v.problem(p, "%q is not host:port (%s)", addr, cause)
		return "", false
	}
	if host == "" && !listen {
		v.problem(p, "%q has no host", addr)
		return "", false
	}
	lo := 1
	if listen {
		lo = 0
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < lo || n > 65535 {
		v.problem(p, "port %q of %q is not a number from %d to 65535", port, addr, lo)
		return "", false
	}
	return normalizeAddress(host, n), true
}

// normalizeAddress is how addresses are compared: host names are case-folded
// without a trailing dot, IP addresses are in canonical form, and
// "localhost", 127.0.0.1 and ::1 are the same host. Names are not resolved.
func normalizeAddress(host string, port int) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	switch host {
	case "localhost", "127.0.0.1", "::1":
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// file resolves a file the config names and checks that it exists. It
// returns the resolved name and whether the file is usable.
func (v *validator) file(p path, name string) (string, bool) {
	resolved := v.resolve(name)
	where := ""
	if resolved != name {
		where = fmt.Sprintf(" (resolved to %s)", resolved)
	}
	fi, err := os.Stat(resolved)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.problem(p, "file %q not found%s", name, where)
		return resolved, false
	case err != nil:
		v.problem(p, "file %q: %v", name, err)
		return resolved, false
	case fi.IsDir():
		v.problem(p, "%q is a directory, not a file%s", name, where)
		return resolved, false
	}
	return resolved, true
}

// resolve anchors a relative file name at the config file's directory, so a
// config means the same files whatever directory kineticd starts in.
func (v *validator) resolve(name string) string {
	if name == "" || filepath.IsAbs(name) || v.dir == "" {
		return name
	}
	return filepath.Join(v.dir, name)
}

func (v *validator) server() {
	s := &v.cfg.Server
	p := keys("server")
	if v.required(p.key("listen"), s.Listen) {
		v.address(p.key("listen"), s.Listen, true)
	}
	v.oneOf(p.key("pool_mode"), s.PoolMode, PoolModeSession, PoolModeTransaction)
	v.intRange(p.key("max_client_conn"), int64(s.MaxClientConn), 1, maxInt)
	v.intRange(p.key("shutdown_timeout_ms"), int64(s.ShutdownTimeoutMS), 0, maxInt)
	for _, t := range []struct {
		key string
		val int
	}{
		{"client_login_timeout_ms", s.ClientLoginTimeoutMS}, {"query_timeout_ms", s.QueryTimeoutMS},
		{"idle_transaction_timeout_ms", s.IdleTransactionTimeoutMS}, {"client_idle_timeout_ms", s.ClientIdleTimeoutMS},
		{"server_lifetime_ms", s.ServerLifetimeMS}, {"server_idle_timeout_ms", s.ServerIdleTimeoutMS},
		{"max_prepared_statements", s.MaxPreparedStatements},
	} {
		v.intRange(p.key(t.key), int64(t.val), 0, maxInt)
	}
	v.oneOf(p.key("backend_tls_mode"), s.BackendTLSMode, TLSDisable, TLSPrefer, TLSRequire)
	if !v.oneOf(p.key("tls_mode"), s.TLSMode, TLSDisable, TLSAllow, TLSRequire, TLSVerifyCA, TLSVerifyFull) || s.TLSMode == TLSDisable {
		// Under "disable" the files are not used, so they are not checked.
		return
	}
	v.caFile(p.key("tls_ca_file"), s)
	certOK, keyOK := false, false
	for _, f := range []struct {
		key  string
		name *string
		ok   *bool
	}{{"tls_cert_file", &s.TLSCertFile, &certOK}, {"tls_key_file", &s.TLSKeyFile, &keyOK}} {
		if *f.name == "" {
			v.problem(p.key(f.key), "required when tls_mode is %q", s.TLSMode)
			continue
		}
		*f.name, *f.ok = v.file(p.key(f.key), *f.name)
	}
	if certOK && keyOK {
		if _, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile); err != nil {
			v.problem(p.key("tls_cert_file"), "tls_cert_file and tls_key_file do not load as a key pair: %v", err)
		}
	}
}

// caFile checks tls_ca_file: required by the verify modes, and when set a
// PEM file holding at least one certificate.
func (v *validator) caFile(p path, s *Server) {
	if s.TLSCAFile == "" {
		if s.ClientCertRequired() {
			v.problem(p, "required when tls_mode is %q: client certificates are verified against it", s.TLSMode)
		}
		return
	}
	name := s.TLSCAFile
	resolved, ok := v.file(p, name)
	s.TLSCAFile = resolved
	if !ok {
		return
	}
	data, err := os.ReadFile(resolved)
	if err != nil {
		v.problem(p, "file %q: %v", name, err)
		return
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		v.problem(p, "file %q holds no PEM certificate", name)
	}
}

func (v *validator) admin() {
	if v.cfg.Admin.RequireTLS && v.cfg.Server.TLSMode == TLSDisable {
		v.problem(keys("admin", "require_tls"), "needs [server] tls_mode other than %q: no client could open the console (an empty [admin] users list disables it)", TLSDisable)
	}
	p := keys("admin", "users")
	if v.bad[p.String()] {
		return // wrong type: the default list is still in place
	}
	seen := map[string]int{}
	for i, name := range v.cfg.Admin.Users {
		ep := p.index(i)
		switch _, isUser := v.cfg.UserByName(name); {
		case name == "":
			v.problem(ep, "empty user name")
		case seen[name] > 0:
			v.problem(ep, "%q is listed twice", name)
		case !isUser && v.defined[p.String()]:
			// Only an explicit list is checked: with the default list and
			// no kinetic_admin user, nobody can open the console, which is
			// a legitimate setup rather than a mistake.
			v.problem(ep, "%q is not a [[users]] name (admins authenticate as users)", name)
		}
		seen[name]++
	}
}

func (v *validator) metricsAndLog() {
	if l := v.cfg.Metrics.Listen; l != "" {
		v.address(keys("metrics", "listen"), l, true)
	}
	v.oneOf(keys("log", "level"), v.cfg.Log.Level, LogDebug, LogInfo, LogWarn, LogError)
	v.oneOf(keys("log", "format"), v.cfg.Log.Format, LogFormatJSON, LogFormatConsole)
}

func (v *validator) users() {
	own, fromFile := v.cfg.Users, []User(nil)
	if v.uf != nil {
		own, fromFile = v.cfg.Users[:v.uf.from], v.cfg.Users[v.uf.from:]
	}
	if len(v.cfg.Users) == 0 {
		if v.uf != nil && len(v.uf.probs) > 0 {
			return // (its own problems say why)
		}
		v.problem(keys("users"), "at least one [[users]] entry is required (here or in users_file)")
		return
	}
	first := map[string]string{} // name → where it was first defined
	v.userList(v, own, first)
	if v.uf != nil {
		// The users file's entries are checked the same way, against this
		// file's [server] and [admin], with problems naming its lines.
		fv := &validator{decoder: v.uf.decoder, cfg: v.cfg, dir: v.dir}
		for _, k := range []path{keys("server", "tls_mode"), keys("server", "tls_ca_file")} {
			if v.bad[k.String()] { // (certUser: already reported there)
				fv.bad[k.String()] = true
			}
		}
		v.userList(fv, fromFile, first)
	}
}

// userList checks users, reporting through w (the file they come from);
// first records where each name was first defined, across both files.
func (v *validator) userList(w *validator, users []User, first map[string]string) {
	for i := range users {
		u := &users[i]
		p := keys("users").index(i)
		if w.required(p.key("name"), u.Name) {
			if prev, dup := first[u.Name]; dup {
				w.problem(p.key("name"), "duplicate user name %q (first at %s)", u.Name, prev)
			} else {
				first[u.Name] = fmt.Sprintf("%s, line %d", p.key("name"), w.lines.lineOf(p.key("name")))
				if w != v {
					first[u.Name] = fmt.Sprintf("%s:%d %s", w.decoder.file, w.lines.lineOf(p.key("name")), p.key("name"))
				}
			}
		}
		if !w.oneOf(p.key("auth"), u.Auth, AuthPassword, AuthCert) {
			continue
		}
		if u.CertCN != "" && u.Auth != AuthCert && v.cfg.Server.TLSMode != TLSVerifyFull {
			w.problem(p.key("cert_cn"), "has no effect: it applies to auth = %q users and to tls_mode = %q", AuthCert, TLSVerifyFull)
		}
		if u.Auth == AuthCert {
			w.certUser(p, u)
			continue
		}
		if !w.required(p.key("password"), u.Password) {
			continue
		}
		kind := u.PasswordKind()
		if kind == PasswordSCRAMSHA256 {
			if _, err := ParseSCRAMVerifier(u.Password); err != nil {
				w.problem(p.key("password"), "malformed SCRAM-SHA-256 verifier: %v", err)
			}
		}
		switch {
		case u.BackendPassword != "" && PasswordKind(u.BackendPassword) != PasswordPlaintext:
			w.problem(p.key("backend_password"), "must be the plaintext password, not %s: a hash cannot log in to a server", kindPhrase(u.BackendPassword))
		case kind == PasswordMD5 && u.BackendPassword == "" && u.BackendUser != "" && u.BackendUser != u.Name:
			// Without backend_password a verifier logs in with what its
			// clients prove, and an md5 hash with itself (SCRAM
			// pass-through); the hash, md5(password || name), only as name.
			w.problem(p.key("backend_password"), "required when password is an MD5 hash and backend_user is not the user's name: the hash logs in only as %q", u.Name)
		}
	}
}

// certUser checks a user with auth = "cert": it has no password (none is
// ever asked for), and the client side must be able to verify certificates.
func (v *validator) certUser(p path, u *User) {
	if u.Password != "" {
		v.problem(p.key("password"), "must be empty when auth = %q: the client is authenticated by its certificate and no password is asked for (backend_password is what logs in to the servers)", AuthCert)
	}
	if u.BackendPassword != "" && PasswordKind(u.BackendPassword) != PasswordPlaintext {
		v.problem(p.key("backend_password"), "must be the plaintext password, not %s: a hash cannot log in to a server", kindPhrase(u.BackendPassword))
	}
	s := v.cfg.Server
	switch {
	case v.bad[keys("server", "tls_mode").String()] || v.bad[keys("server", "tls_ca_file").String()]:
	case s.TLSMode == TLSDisable:
		v.problem(p.key("auth"), "%q needs [server] tls_mode other than %q", AuthCert, TLSDisable)
	case s.TLSCAFile == "":
		v.problem(p.key("auth"), "%q needs [server] tls_ca_file: client certificates are verified against it", AuthCert)
	}
}

func (v *validator) routes() {
	if len(v.cfg.Routes) == 0 {
		v.problem(keys("routes"), "at least one [[routes]] entry is required")
		return
	}
	names, dbs := map[string]path{}, map[string]path{}
	for i := range v.cfg.Routes {
		r := &v.cfg.Routes[i]
		p := keys("routes").index(i)
		v.unique(p.key("name"), r.Name, "route name", names)
		if v.required(p.key("database"), r.Database) {
			if r.Database == AdminDatabase {
				v.problem(p.key("database"), "%q is reserved for the admin console", AdminDatabase)
			} else {
				v.unique(p.key("database"), r.Database, "route database", dbs)
			}
		}
		v.servers(p, r)
		v.authQuery(p, r)
		v.readRouting(p.key("read_routing"), r)
		v.freshness(p.key("freshness"), &r.Freshness)
		v.ha(p.key("ha"), &r.HA)
		v.intRange(p.keys("pool", "size"), int64(r.Pool.Size), 1, maxInt)
		v.intRange(p.keys("pool", "acquire_timeout_ms"), int64(r.Pool.AcquireTimeoutMS), 0, maxInt)
		v.poolLimits(p.key("pool"), &r.Pool)
		v.queryClasses(p.key("query_classes"), r)
	}
}

// poolLimits checks max_db_connections, max_user_connections,
// max_concurrent_dials and a route's own server_lifetime_ms. A per-user limit above the per-server one can
// never be reached: it is refused rather than silently meaningless.
func (v *validator) poolLimits(p path, pl *Pool) {
	okDB := v.intRange(p.key("max_db_connections"), int64(pl.MaxDBConnections), 0, maxInt)
	okUser := v.intRange(p.key("max_user_connections"), int64(pl.MaxUserConnections), 0, maxInt)
	if okDB && okUser && pl.MaxDBConnections > 0 && pl.MaxUserConnections > pl.MaxDBConnections {
		v.problem(p.key("max_user_connections"), "must not exceed max_db_connections (%d)", pl.MaxDBConnections)
	}
	v.intRange(p.key("max_concurrent_dials"), int64(pl.MaxConcurrentDials), 1, maxInt)
	if pl.ServerLifetimeMS != nil {
		v.intRange(p.key("server_lifetime_ms"), int64(*pl.ServerLifetimeMS), 0, maxInt)
	}
}

// authQuery checks auth_user, auth_query and auth_cache_ttl_ms. auth_user
// must be a [[users]] name (its backend credentials run the query);
// auth_query must bind the client's user name as $1.
func (v *validator) authQuery(p path, r *Route) {
	v.intRange(p.key("auth_cache_ttl_ms"), int64(r.AuthCacheTTLMS), 0, maxInt)
	if r.AuthUser == "" {
		return
	}
	if _, ok := v.cfg.UserByName(r.AuthUser); !ok {
		v.problem(p.key("auth_user"), "%q is not a [[users]] name (its credentials log in to the primary to run auth_query)", r.AuthUser)
	}
	switch {
	case strings.TrimSpace(r.AuthQuery) == "":
		v.problem(p.key("auth_query"), "required when auth_user is set")
	case !strings.Contains(r.AuthQuery, "$1"):
		v.problem(p.key("auth_query"), "must use $1 for the user name (it is bound as a parameter, never pasted into the text)")
	}
}

// unique checks a required name that must not repeat across entries.
func (v *validator) unique(p path, val, what string, first map[string]path) {
	if !v.required(p, val) {
		return
	}
	if prev, dup := first[val]; dup {
		v.problem(p, "duplicate %s %q (first at %s, line %d)", what, val, prev, v.lines.lineOf(prev))
		return
	}
	first[val] = p
}

func (v *validator) servers(p path, r *Route) {
	var primary string
	if ap := p.keys("primary", "address"); v.required(ap, r.Primary.Address) {
		primary, _ = v.address(ap, r.Primary.Address, false)
	}
	seen := map[string]path{}
	for j, rep := range r.Replicas {
		rp := p.key("replicas").index(j)
		v.intRange(rp.key("weight"), int64(rep.Weight), 0, maxInt)
		ap := rp.key("address")
		if !v.required(ap, rep.Address) {
			continue
		}
		norm, ok := v.address(ap, rep.Address, false)
		switch {
		case !ok:
		case norm == primary:
			v.problem(ap, "%q is the primary's address; a server cannot be its own replica", rep.Address)
		case seen[norm] != nil:
			v.problem(ap, "duplicate replica %q (first at %s, line %d)", rep.Address, seen[norm], v.lines.lineOf(seen[norm]))
		default:
			seen[norm] = ap
		}
	}
}

func (v *validator) readRouting(p path, r *Route) {
	rr := &r.ReadRouting
	if v.oneOf(p.key("read_routing_mode"), rr.ReadRoutingMode, RoutingOff, RoutingPreferReplica, RoutingRequireReplica) &&
		rr.ReadRoutingMode == RoutingRequireReplica && len(r.Replicas) == 0 {
		v.problem(p.key("read_routing_mode"), "require_replica needs at least one [[routes.replicas]]; every read would be rejected")
	}
	v.oneOf(p.key("fallback_policy"), rr.FallbackPolicy, FallbackPrimary, FallbackWait, FallbackReject)
	if c := rr.DefaultQueryClass; c != "" {
		if _, ok := r.QueryClass(c); !ok {
			v.problem(p.key("default_query_class"), "%q is neither a [[routes.query_classes]] name of this route nor a shared class (%s, %s, %s, %s)",
				c, QueryClassSessionState, QueryClassReportingAggregate, QueryClassBillingBalance, QueryClassCatalogBrowse)
		}
	}
	writes := map[string]bool{}
	for j, f := range rr.WriteFunctions {
		if f == "" {
			v.problem(p.key("write_functions").index(j), "empty function name")
		}
		writes[f] = true
	}
	for j, f := range rr.ReadOnlyFunctions {
		switch {
		case f == "":
			v.problem(p.key("read_only_functions").index(j), "empty function name")
		case writes[f]:
			v.problem(p.key("read_only_functions").index(j), "%q is also in write_functions", f)
		}
	}
}

func (v *validator) freshness(p path, f *Freshness) {
	if v.oneOf(p.key("freshness_policy"), f.FreshnessPolicy, FreshnessNone, FreshnessMaxLag, FreshnessSessionWriteLSN, FreshnessSessionWriteLSNAndMax) &&
		(f.FreshnessPolicy == FreshnessMaxLag || f.FreshnessPolicy == FreshnessSessionWriteLSNAndMax) && f.MaxReplicaLagMS == 0 {
		v.problem(p.key("max_replica_lag_ms"), "must be at least 1 when freshness_policy is %q (there is no unlimited lag; choose a policy without max_lag instead)", f.FreshnessPolicy)
	} else {
		v.intRange(p.key("max_replica_lag_ms"), int64(f.MaxReplicaLagMS), 0, maxInt)
	}
	v.intRange(p.key("max_replica_lag_bytes"), f.MaxReplicaLagBytes, 0, math.MaxInt64)
	v.intRange(p.key("read_after_write_timeout_ms"), int64(f.ReadAfterWriteTimeoutMS), 0, maxInt)
	v.intRange(p.key("sticky_primary_window_ms"), int64(f.StickyPrimaryWindowMS), 0, maxInt)
	v.intRange(p.key("max_primary_fallback_inflight"), int64(f.MaxPrimaryFallbackInflight), 0, maxInt)
	v.oneOf(p.key("read_consistency"), f.ReadConsistency, ConsistencySession, ConsistencyStrict)
}

func (v *validator) ha(p path, h *HA) {
	okInterval := v.intRange(p.key("replica_health_interval_ms"), int64(h.ReplicaHealthIntervalMS), 1, maxInt)
	okTimeout := v.intRange(p.key("replica_health_timeout_ms"), int64(h.ReplicaHealthTimeoutMS), 1, maxInt)
	if okInterval && okTimeout && h.ReplicaHealthTimeoutMS > h.ReplicaHealthIntervalMS {
		v.problem(p.key("replica_health_timeout_ms"), "must not exceed replica_health_interval_ms (%d)", h.ReplicaHealthIntervalMS)
		okTimeout = false
	}
	if !v.intRange(p.key("verdict_ttl_ms"), int64(h.VerdictTTLMS), 0, maxInt) || h.VerdictTTLMS == 0 || !okInterval || !okTimeout {
		return
	}
	if floor := h.ReplicaHealthIntervalMS + h.ReplicaHealthTimeoutMS; h.VerdictTTLMS < floor {
		v.problem(p.key("verdict_ttl_ms"), "must be 0 or at least replica_health_interval_ms + replica_health_timeout_ms (%d), or verdicts expire between probes", floor)
	}
}

func (v *validator) queryClasses(p path, r *Route) {
	first := map[string]path{}
	for j, qc := range r.QueryClasses {
		cp := p.index(j)
		np := cp.key("name")
		switch {
		case qc.Name == "":
			v.problem(np, "required")
		case !isClassName(qc.Name):
			v.problem(np, "%q: a class name is letters, digits, '_' and '-' only (it must fit in a hint word)", qc.Name)
		case qc.Name == "default":
			v.problem(np, "\"default\" is reserved: it labels reads that declare no class")
		default:
			v.unique(np, qc.Name, "query class", first)
		}
		if v.oneOf(cp.key("routing"), qc.Routing, ClassPrimaryOnly, ClassReplicaIfLagOK, ClassReplicaToleratesStaleness) &&
			AlwaysPrimaryOnly(qc.Name) && qc.Routing != ClassPrimaryOnly {
			v.problem(cp.key("routing"), "%s is always primary_only (got %q)", qc.Name, qc.Routing)
		}
		v.intRange(cp.key("stage"), int64(qc.Stage), 0, maxInt)
		if qc.FallbackPolicy != "" {
			v.oneOf(cp.key("fallback_policy"), qc.FallbackPolicy, "", FallbackPrimary, FallbackWait, FallbackReject)
		}
	}
}

func isClassName(s string) bool {
	for _, r := range s {
		if !isBareKeyRune(r) {
			return false
		}
	}
	return s != ""
}

func (v *validator) rollout() {
	ro := &v.cfg.Rollout
	p := keys("rollout")
	v.intRange(p.key("stage"), int64(ro.Stage), 0, maxInt)
	v.intRange(p.key("lag_slo_window_ms"), int64(ro.LagSLOWindowMS), 1, maxInt)
	if ro.StateFile == "" {
		return
	}
	// The file itself may not exist yet (it is written on the first
	// ROUTING ROLLBACK/STAGE), but its directory must.
	name := ro.StateFile
	ro.StateFile = v.resolve(name)
	if fi, err := os.Stat(ro.StateFile); err == nil && fi.IsDir() {
		v.problem(p.key("state_file"), "%q is a directory, not a file", name)
		return
	}
	dir := filepath.Dir(ro.StateFile)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		v.problem(p.key("state_file"), "directory %q of %q does not exist", dir, name)
	}
}

func kindPhrase(password string) string {
	if PasswordKind(password) == PasswordMD5 {
		return "an MD5 hash"
	}
	return "a SCRAM-SHA-256 verifier"
}
