package admin

// The admin console's command layer (SPEC §8). This file knows nothing about
// sockets or the wire protocol: the proxy hands Execute one simple-query
// string and a Source, and turns the Result into RowDescription, DataRow and
// CommandComplete messages, or the *Error into an ErrorResponse.
//
// The admin language is a fixed keyword set, like PgBouncer's console, not
// SQL: a command is split on whitespace and matched word by word.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SQLSTATE codes carried by *Error.
const (
	// CodeSyntaxError (syntax_error): the command is not one of the admin
	// commands, or has extra words.
	CodeSyntaxError = "42601"
	// CodeInvalidParameterValue (invalid_parameter_value): a command's
	// argument is missing or malformed, as in ROUTING STAGE x.
	CodeInvalidParameterValue = "22023"
	// CodeObjectNotInPrerequisiteState (object_not_in_prerequisite_state):
	// the proxy refused a RELOAD, ROUTING ROLLBACK or ROUTING STAGE.
	CodeObjectNotInPrerequisiteState = "55000"
	// CodeInternalError (internal_error): the console has no Source.
	CodeInternalError = "XX000"
)

// Result is what a command answers: a row set whose values are all text ("" for
// unknown/NULL) and the CommandComplete tag. A command that returns no rows
// (RELOAD, ROUTING ...) has nil Columns: the proxy sends CommandComplete only,
// no RowDescription. The zero Result (Tag "") answers an empty command; the
// proxy should send EmptyQueryResponse for it, as PostgreSQL does.
type Result struct {
	Columns []string
	Rows    [][]string
	Tag     string
}

// Source is what the console reads and drives; the proxy implements it.
// Rows are shown in the order the Source returns them.
type Source interface {
	Servers() []ServerRow     // SHOW SERVERS
	Clients() []ClientRow     // SHOW CLIENTS
	Routes() []RouteRow       // SHOW ROUTES
	Pools() []PoolRow         // SHOW POOLS
	Stats() []StatRow         // SHOW STATS
	Rollout() []RolloutRow    // SHOW ROLLOUT
	ConfigLines() [][2]string // SHOW CONFIG: key, value (secrets redacted by the proxy)
	Version() string          // SHOW VERSION
	Reload() error            // RELOAD: non-nil when the new config is refused
	RoutingRollback() error   // ROUTING ROLLBACK
	RoutingStage(n int) error // ROUTING STAGE n (n >= 0)
	// Pause holds new units of route ("" every route) and returns once no
	// transaction of it is in flight; Resume releases them (PAUSE/RESUME
	// [route], PgBouncer's words). An unknown route is an error.
	Pause(route string) error
	Resume(route string) error
}

// ServerRow is one backend of one route as the health prober sees it.
type ServerRow struct {
	Route          string
	Address        string
	ConfiguredRole string
	DetectedRole   string // "" when never probed
	Healthy        bool
	Reachable      bool
	Timeline       uint32 // 0 when unknown
	ReplayLSN      string // "" when unknown or not a replica
	LagBytes       int64  // negative when unknown
	LagMS          int64  // negative when unknown
	ProbeAgeMS     int64  // negative when never probed
	SplitBrain     bool
	Weight         int
	PoolActive     int
	PoolIdle       int
}

// ClientRow is one client connection.
type ClientRow struct {
	ID          uint64
	User        string
	Database    string
	Addr        string
	State       string
	Server      string
	LastRoute   string
	ConnectedAt time.Time // zero shown as ""
}

// RouteRow is one query class of one route.
type RouteRow struct {
	Route    string
	Class    string
	Routing  string
	Mode     string
	Stage    int
	Enabled  bool
	Primary  uint64
	Replica  uint64
	Rejected uint64
}

// RolloutRow is one route's rollout state in force (SPEC §6) and, with
// [rollout] shared, how it stands with the route's shared row.
type RolloutRow struct {
	Route      string
	Stage      int
	RolledBack bool
	Shared     bool
	Version    int64  // the shared row's version last seen; 0 = none
	Pending    string // a local change not yet in the shared row ("" = none)
	Sync       string // the syncer's status ("" when not shared)
}

// PoolRow is one server pool.
type PoolRow struct {
	Route    string
	Server   string
	User     string
	Database string
	Active   int
	Idle     int
	Waiting  int
	Size     int
}

// StatRow is one named counter or gauge, already formatted.
type StatRow struct {
	Name  string
	Value string
}

// Error is an admin command failure with its SQLSTATE, for an ErrorResponse
// (severity ERROR; Code → 'C', Message → 'M', Detail → 'D' when not empty).
type Error struct {
	Code    string
	Message string
	Detail  string
}

func (e *Error) Error() string {
	s := e.Message + " (SQLSTATE " + e.Code + ")"
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Column lists, exactly as SPEC §8 and issue 5 name them.
var (
	ServersColumns = []string{"route", "address", "configured_role", "detected_role", "healthy", "reachable", "timeline", "replay_lsn", "lag_bytes", "lag_ms", "probe_age_ms", "split_brain", "weight", "pool_active", "pool_idle"}
	ClientsColumns = []string{"id", "user", "database", "client_addr", "state", "server", "last_route", "connected_at"}
	RoutesColumns  = []string{"route", "query_class", "routing", "mode", "stage", "enabled", "decisions_primary", "decisions_replica", "decisions_rejected"}
	PoolsColumns   = []string{"route", "server", "user", "database", "active", "idle", "waiting", "size"}
	StatsColumns   = []string{"name", "value"}
	RolloutColumns = []string{"route", "stage", "rolled_back", "shared", "version", "pending", "sync"}
	ConfigColumns  = []string{"key", "value"}
	VersionColumns = []string{"version"}
)

// Commands lists the admin commands, in the order the unknown-command error
// shows them.
var Commands = []string{
	"SHOW SERVERS", "SHOW CLIENTS", "SHOW ROUTES", "SHOW POOLS", "SHOW STATS",
	"SHOW ROLLOUT", "SHOW CONFIG", "SHOW VERSION", "RELOAD", "ROUTING ROLLBACK", "ROUTING STAGE n",
	"PAUSE [route]", "RESUME [route]",
}

// Command tags.
const (
	TagShow            = "SHOW"
	TagReload          = "RELOAD"
	TagRoutingRollback = "ROUTING ROLLBACK"
	TagRoutingStage    = "ROUTING STAGE"
	TagPause           = "PAUSE"
	TagResume          = "RESUME"
)

// Execute runs one admin command. Keywords are case-insensitive; surrounding
// whitespace and one trailing ';' are allowed. An empty command returns the
// zero Result and no error. Every error is an *Error.
func Execute(command string, src Source) (Result, error) {
	s := strings.TrimSpace(command)
	s = strings.TrimSuffix(s, ";")
	words := strings.Fields(s)
	if len(words) == 0 {
		return Result{}, nil
	}
	if src == nil {
		return Result{}, &Error{Code: CodeInternalError, Message: "admin console is not connected to the proxy"}
	}
	kw := make([]string, len(words))
	for i, w := range words {
		kw[i] = strings.ToUpper(w)
	}

	switch kw[0] {
	case "SHOW":
		if len(kw) != 2 {
			return Result{}, unknown(s)
		}
		switch kw[1] {
		case "SERVERS":
			return showServers(src.Servers()), nil
		case "CLIENTS":
			return showClients(src.Clients()), nil
		case "ROUTES":
			return showRoutes(src.Routes()), nil
		case "POOLS":
			return showPools(src.Pools()), nil
		case "STATS":
			return showStats(src.Stats()), nil
		case "ROLLOUT":
			return showRollout(src.Rollout()), nil
		case "CONFIG":
			return showConfig(src.ConfigLines()), nil
		case "VERSION":
			return Result{Columns: cols(VersionColumns), Rows: [][]string{{src.Version()}}, Tag: TagShow}, nil
		}
	case "RELOAD":
		if len(kw) != 1 {
			return Result{}, unknown(s)
		}
		if err := src.Reload(); err != nil {
			return Result{}, refused("reload refused", err)
		}
		return Result{Tag: TagReload}, nil
	case "PAUSE", "RESUME":
		if len(kw) > 2 {
			return Result{}, unknown(s)
		}
		route := ""
		if len(words) == 2 {
			route = words[1]
		}
		if kw[0] == "PAUSE" {
			if err := src.Pause(route); err != nil {
				return Result{}, refused("pause refused", err)
			}
			return Result{Tag: TagPause}, nil
		}
		if err := src.Resume(route); err != nil {
			return Result{}, refused("resume refused", err)
		}
		return Result{Tag: TagResume}, nil
	case "ROUTING":
		if len(kw) < 2 {
			return Result{}, unknown(s)
		}
		switch kw[1] {
		case "ROLLBACK":
			if len(kw) != 2 {
				return Result{}, unknown(s)
			}
			if err := src.RoutingRollback(); err != nil {
				return Result{}, refused("routing rollback refused", err)
			}
			return Result{Tag: TagRoutingRollback}, nil
		case "STAGE":
			if len(kw) > 3 {
				return Result{}, unknown(s)
			}
			if len(kw) == 2 {
				return Result{}, &Error{Code: CodeInvalidParameterValue,
					Message: "ROUTING STAGE needs a stage number",
					Detail:  "usage: ROUTING STAGE n, with n a non-negative integer"}
			}
			n, err := parseStage(words[2])
			if err != nil {
				return Result{}, err
			}
			if err := src.RoutingStage(n); err != nil {
				return Result{}, refused(fmt.Sprintf("routing stage %d refused", n), err)
			}
			return Result{Tag: TagRoutingStage}, nil
		}
	}
	return Result{}, unknown(s)
}

func parseStage(arg string) (int, error) {
	bad := func(why string) error {
		return &Error{Code: CodeInvalidParameterValue,
			Message: fmt.Sprintf("invalid stage %q for ROUTING STAGE: %s", arg, why),
			Detail:  "usage: ROUTING STAGE n, with n a non-negative integer"}
	}
	digits := arg
	if strings.HasPrefix(arg, "-") {
		digits = arg[1:]
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, bad("not an integer")
		}
	}
	if digits == "" {
		return 0, bad("not an integer")
	}
	if digits != arg {
		return 0, bad("must not be negative")
	}
	n, err := strconv.Atoi(arg)
	if err != nil {
		return 0, bad("out of range")
	}
	return n, nil
}

func unknown(s string) *Error {
	return &Error{
		Code:    CodeSyntaxError,
		Message: fmt.Sprintf("unknown admin command %q; commands are: %s", s, strings.Join(Commands, ", ")),
		Detail:  "the admin console (database pgkinetic) accepts only its own commands, not SQL",
	}
}

// refused maps a Source error to 55000, keeping the code of an *Error the
// Source returned itself.
func refused(what string, err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	return &Error{Code: CodeObjectNotInPrerequisiteState, Message: what + ": " + err.Error()}
}

func cols(c []string) []string { return append([]string(nil), c...) }

func showServers(in []ServerRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		tl := ""
		if r.Timeline != 0 {
			tl = strconv.FormatUint(uint64(r.Timeline), 10)
		}
		rows = append(rows, []string{
			r.Route, r.Address, r.ConfiguredRole, r.DetectedRole,
			boolText(r.Healthy), boolText(r.Reachable), tl, r.ReplayLSN,
			knownInt(r.LagBytes), knownInt(r.LagMS), knownInt(r.ProbeAgeMS),
			boolText(r.SplitBrain), strconv.Itoa(r.Weight),
			strconv.Itoa(r.PoolActive), strconv.Itoa(r.PoolIdle),
		})
	}
	return Result{Columns: cols(ServersColumns), Rows: rows, Tag: TagShow}
}

func showClients(in []ClientRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		at := ""
		if !r.ConnectedAt.IsZero() {
			at = r.ConnectedAt.UTC().Format("2006-01-02 15:04:05.999999-07")
		}
		rows = append(rows, []string{
			strconv.FormatUint(r.ID, 10), r.User, r.Database, r.Addr,
			r.State, r.Server, r.LastRoute, at,
		})
	}
	return Result{Columns: cols(ClientsColumns), Rows: rows, Tag: TagShow}
}

func showRoutes(in []RouteRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		rows = append(rows, []string{
			r.Route, r.Class, r.Routing, r.Mode, strconv.Itoa(r.Stage),
			boolText(r.Enabled), strconv.FormatUint(r.Primary, 10),
			strconv.FormatUint(r.Replica, 10), strconv.FormatUint(r.Rejected, 10),
		})
	}
	return Result{Columns: cols(RoutesColumns), Rows: rows, Tag: TagShow}
}

func showPools(in []PoolRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		rows = append(rows, []string{
			r.Route, r.Server, r.User, r.Database, strconv.Itoa(r.Active),
			strconv.Itoa(r.Idle), strconv.Itoa(r.Waiting), strconv.Itoa(r.Size),
		})
	}
	return Result{Columns: cols(PoolsColumns), Rows: rows, Tag: TagShow}
}

func showStats(in []StatRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		rows = append(rows, []string{r.Name, r.Value})
	}
	return Result{Columns: cols(StatsColumns), Rows: rows, Tag: TagShow}
}

func showRollout(in []RolloutRow) Result {
	rows := make([][]string, 0, len(in))
	for _, r := range in {
		rows = append(rows, []string{r.Route, strconv.Itoa(r.Stage), boolText(r.RolledBack),
			boolText(r.Shared), strconv.FormatInt(r.Version, 10), r.Pending, r.Sync})
	}
	return Result{Columns: cols(RolloutColumns), Rows: rows, Tag: TagShow}
}

func showConfig(in [][2]string) Result {
	rows := make([][]string, 0, len(in))
	for _, kv := range in {
		rows = append(rows, []string{kv[0], kv[1]})
	}
	return Result{Columns: cols(ConfigColumns), Rows: rows, Tag: TagShow}
}

// boolText renders a boolean the way PostgreSQL's text output does.
func boolText(b bool) string {
	if b {
		return "t"
	}
	return "f"
}

// knownInt renders a measurement, with a negative value (unknown) as "".
func knownInt(v int64) string {
	if v < 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}
