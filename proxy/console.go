package proxy

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// errConsoleDone ends an admin console session that closed normally.
var errConsoleDone = errors.New("admin console session ended")

// serveAdmin runs the admin console (database "pgkinetic", SPEC §8) for an
// authenticated admin: simple query protocol only, nothing reaches a server.
func (ss *session) serveAdmin() error {
	var secret [4]byte
	msgs := []wire.Encoder{}
	if ss.authFinal != nil {
		msgs = append(msgs, ss.authFinal)
	}
	msgs = append(msgs, &pgproto3.AuthenticationOk{})
	for _, p := range [][2]string{{"server_version", "15.0 (pg-kinetic console)"}, {"server_encoding", "UTF8"},
		{"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
		{"standard_conforming_strings", "on"}, {"application_name", ss.startupParams["application_name"]}} {
		msgs = append(msgs, &pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	msgs = append(msgs, &pgproto3.BackendKeyData{ProcessID: 0, SecretKey: secret[:]}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := ss.send(msgs...); err != nil {
		return errClientGone{err}
	}
	ss.conn.SetDeadline(time.Time{})
	src := consoleSource{s: ss.srv}
	skip := false
	for {
		h, err := wire.ReadHeader(ss.r)
		if err != nil {
			return errClientGone{err}
		}
		limit, ok := frontendLimit(h.Type)
		if !ok || h.Len > limit || h.Len > maxBatchBytes {
			return protocolViolation("invalid message on the admin console")
		}
		body, err := wire.ReadBody(ss.r, h.Len, nil)
		if err != nil {
			return errClientGone{err}
		}
		switch h.Type {
		case 'X':
			return errConsoleDone
		case 'Q':
			text := strings.TrimRight(string(body), "\x00")
			ss.log.Info("admin command", zap.String("user", ss.user), zap.String("command", text))
			res, err := admin.Execute(text, src)
			out := []wire.Encoder{}
			if err != nil {
				e := errorf("XX000", "%s", err.Error())
				if ae, ok := err.(*admin.Error); ok {
					e.Code, e.Message, e.Detail = ae.Code, ae.Message, ae.Detail
				}
				out = append(out, e)
			} else {
				if res.Columns != nil {
					fields := make([]pgproto3.FieldDescription, len(res.Columns))
					for i, c := range res.Columns {
						fields[i] = pgproto3.FieldDescription{Name: []byte(c), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}
					}
					out = append(out, &pgproto3.RowDescription{Fields: fields})
					for _, row := range res.Rows {
						vals := make([][]byte, len(row))
						for i, v := range row {
							vals[i] = []byte(v)
						}
						out = append(out, &pgproto3.DataRow{Values: vals})
					}
				}
				if res.Tag == "" {
					out = append(out, &pgproto3.EmptyQueryResponse{})
				} else {
					out = append(out, &pgproto3.CommandComplete{CommandTag: []byte(res.Tag)})
				}
			}
			out = append(out, &pgproto3.ReadyForQuery{TxStatus: 'I'})
			if err := ss.send(out...); err != nil {
				return errClientGone{err}
			}
		case 'S':
			skip = false
			if err := ss.send(&pgproto3.ReadyForQuery{TxStatus: 'I'}); err != nil {
				return errClientGone{err}
			}
		default:
			if !skip {
				skip = true
				if err := ss.send(errorf(codeFeatureNotSupported, "pg-kinetic: the admin console speaks the simple query protocol only")); err != nil {
					return errClientGone{err}
				}
			}
		}
	}
}

// consoleSource is the proxy's side of admin.Source.
type consoleSource struct{ s *Server }

var _ admin.Source = consoleSource{}

func (c consoleSource) Version() string { return c.s.opts.Version }

func (c consoleSource) Reload() error {
	if c.s.opts.Reload == nil {
		return fmt.Errorf("reload is not available in this process")
	}
	return c.s.opts.Reload()
}

func (c consoleSource) RoutingRollback() error {
	if err := c.s.rollout.rollback(c.s.routeNames()); err != nil {
		return err
	}
	c.s.syncers.kick()
	c.s.log.Warn("ROUTING ROLLBACK: every read goes to the primary until ROUTING STAGE n")
	return nil
}

func (c consoleSource) RoutingStage(n int) error {
	if err := c.s.rollout.setStage(c.s.routeNames(), n); err != nil {
		return err
	}
	c.s.syncers.kick()
	c.s.log.Warn("ROUTING STAGE: query classes enabled through this stage", zap.Int("stage", n))
	return nil
}

// Pause is PAUSE [route] (pause.go).
func (c consoleSource) Pause(route string) error { return c.s.pause(route) }

// Resume is RESUME [route].
func (c consoleSource) Resume(route string) error { return c.s.resume(route) }

func (c consoleSource) Servers() []admin.ServerRow {
	cfg := c.s.opts.Config.Load()
	r := c.s.routing.Load()
	now := time.Now()
	pools := c.s.poolStats()
	var out []admin.ServerRow
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		var snap *health.Snapshot
		if c := r.route(rt.Name).checkerOf(); c != nil {
			snap = c.Snapshot()
		}
		add := func(addr, role string, weight int) {
			row := admin.ServerRow{Route: rt.Name, Address: addr, ConfiguredRole: role, Weight: weight,
				LagBytes: -1, LagMS: -1, ProbeAgeMS: -1}
			if snap != nil {
				if v, ok := snap.Get(addr); ok {
					row.Reachable = v.Reachable
					if v.Detected != health.RoleUnknown {
						row.DetectedRole = v.Detected.String()
					}
					row.Timeline = v.Timeline
					if v.ReplayLSN != 0 {
						row.ReplayLSN = freshness.LSN(v.ReplayLSN).String()
					}
					// Lag and health by what the server is now: with
					// follow_failover a configured replica may be the
					// elected primary, and the configured primary a
					// standby.
					if !v.Elected {
						row.LagBytes, row.LagMS = v.LagBytes, v.LagMS
					} else {
						row.LagBytes, row.LagMS = 0, 0
					}
					row.ProbeAgeMS = now.Sub(v.ProbedAt).Milliseconds()
					row.SplitBrain = v.SplitBrain || v.IdentityMismatch
					if !v.Elected {
						// Healthy: it could serve a read inside the route's
						// lag budget now (no session floor).
						row.Healthy, _ = freshness.Eligible(v, true, freshness.Requirement{VerdictTTL: rt.HA.VerdictTTL(),
							MaxLagMS: int64(rt.Freshness.MaxReplicaLagMS), MaxLagBytes: rt.Freshness.MaxReplicaLagBytes}, now)
					} else {
						row.Healthy = v.Reachable && !row.SplitBrain
					}
				}
			}
			for _, p := range pools {
				if p.Server == addr {
					row.PoolActive += p.Active
					row.PoolIdle += p.Idle
				}
			}
			out = append(out, row)
		}
		add(rt.Primary.Address, "primary", 0)
		for _, rep := range rt.Replicas {
			add(rep.Address, "standby", rep.Weight)
		}
	}
	return out
}

func (c consoleSource) Clients() []admin.ClientRow {
	c.s.mu.Lock()
	sessions := make([]*session, 0, len(c.s.sessions))
	for ss := range c.s.sessions {
		sessions = append(sessions, ss)
	}
	c.s.mu.Unlock()
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].id < sessions[j].id })
	var out []admin.ClientRow
	for _, ss := range sessions {
		ss.mu.Lock()
		row := admin.ClientRow{ID: ss.id, User: ss.user, Database: ss.database, Addr: ss.conn.RemoteAddr().String(),
			LastRoute: ss.lastRouteText(), ConnectedAt: ss.connected, State: "idle"}
		if ss.mu.pending > 0 {
			row.State = "active"
		} else if ss.mu.tx != 'I' {
			row.State = "idle in transaction"
		}
		if ss.mu.cur != nil {
			row.Server = ss.mu.cur.addr
		} else if ss.mu.primary != nil {
			row.Server = ss.mu.primary.addr
		}
		ss.mu.Unlock()
		out = append(out, row)
	}
	return out
}

func (c consoleSource) Routes() []admin.RouteRow {
	cfg := c.s.opts.Config.Load()
	var out []admin.RouteRow
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		stage, rolledBack := c.s.rollout.get(rt.Name)
		row := func(class, routing string, enabled bool, clStage int) admin.RouteRow {
			return admin.RouteRow{Route: rt.Name, Class: class, Routing: routing, Mode: rt.ReadRouting.ReadRoutingMode,
				Stage: clStage, Enabled: enabled && !rolledBack && rt.ReadRouting.ReadRoutingMode != config.RoutingOff,
				Primary: c.s.decisionCount(rt.Name, class, targetPrimary), Replica: c.s.decisionCount(rt.Name, class, targetReplica),
				Rejected: c.s.decisionCount(rt.Name, class, targetRejected)}
		}
		out = append(out, row("", "route policy ("+rt.Freshness.FreshnessPolicy+")", true, 0))
		for _, qc := range rt.QueryClasses {
			enabled := qc.Routing != config.ClassPrimaryOnly && qc.Stage <= stage
			out = append(out, row(qc.Name, qc.Routing, enabled, qc.Stage))
		}
	}
	for i := range out {
		if out[i].Class == "" {
			out[i].Class = "default"
		}
	}
	return out
}

// poolStats lists every server pool.
func (s *Server) poolStats() []admin.PoolRow {
	var out []admin.PoolRow
	s.pools.Each(func(p *pool.Pool) {
		k, st := p.Key(), p.Stats()
		out = append(out, admin.PoolRow{Server: k.Addr, User: k.User, Database: k.Database,
			Active: st.Active, Idle: st.Idle, Waiting: st.Waiting, Size: p.Size()})
	})
	cfg := s.opts.Config.Load()
	for i := range out {
		for _, rt := range cfg.Routes {
			if rt.BackendDB() == out[i].Database && (rt.Primary.Address == out[i].Server || hasReplica(&rt, out[i].Server)) {
				out[i].Route = rt.Name
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Route+out[i].Server+out[i].User < out[j].Route+out[j].Server+out[j].User
	})
	return out
}

func hasReplica(rt *config.Route, addr string) bool {
	for _, r := range rt.Replicas {
		if r.Address == addr {
			return true
		}
	}
	return false
}

func (c consoleSource) Pools() []admin.PoolRow { return c.s.poolStats() }

func (c consoleSource) Stats() []admin.StatRow {
	// The state in force of the first route (per route: SHOW ROLLOUT).
	first := ""
	if cfg := c.s.opts.Config.Load(); len(cfg.Routes) > 0 {
		first = cfg.Routes[0].Name
	}
	stage, rolledBack := c.s.rollout.get(first)
	var prim, rep, rej uint64
	c.s.rangeDecisions(func(k, v any) bool {
		n := v.(*atomic.Uint64).Load()
		switch {
		case strings.HasSuffix(k.(string), "\x00"+targetPrimary):
			prim += n
		case strings.HasSuffix(k.(string), "\x00"+targetReplica):
			rep += n
		default:
			rej += n
		}
		return true
	})
	return []admin.StatRow{
		{Name: "client_connections", Value: strconv.FormatInt(c.s.clients.Load(), 10)},
		{Name: "units_primary", Value: strconv.FormatUint(prim, 10)},
		{Name: "units_replica", Value: strconv.FormatUint(rep, 10)},
		{Name: "units_rejected", Value: strconv.FormatUint(rej, 10)},
		{Name: "rollout_stage", Value: strconv.Itoa(stage)},
		{Name: "rolled_back", Value: strconv.FormatBool(rolledBack)},
	}
}

// Rollout is SHOW ROLLOUT: each route's state in force and, when shared,
// the row version last seen, a local change not yet written, and the
// syncer's status.
func (c consoleSource) Rollout() []admin.RolloutRow {
	var out []admin.RolloutRow
	for _, name := range c.s.routeNames() {
		stage, rolledBack := c.s.rollout.get(name)
		view, shared := c.s.rollout.view(name)
		row := admin.RolloutRow{Route: name, Stage: stage, RolledBack: rolledBack, Shared: shared}
		if shared {
			row.Version, row.Sync = view.Known.Version, c.s.syncers.status(name)
			if p := view.Pending; p != nil {
				row.Pending = fmt.Sprintf("stage=%d rolled_back=%t base_version=%d", p.Stage, p.RolledBack, p.Base)
			}
		}
		out = append(out, row)
	}
	return out
}

func (c consoleSource) ConfigLines() [][2]string {
	cfg := c.s.opts.Config.Load()
	lines := [][2]string{
		{"server.listen", cfg.Server.Listen}, {"server.pool_mode", cfg.Server.PoolMode},
		{"server.max_client_conn", strconv.Itoa(cfg.Server.MaxClientConn)}, {"server.tls_mode", cfg.Server.TLSMode},
		{"server.tls_ca_file", cfg.Server.TLSCAFile}, {"admin.require_tls", strconv.FormatBool(cfg.Admin.RequireTLS)},
		{"server.backend_tls_mode", cfg.Server.BackendTLSMode}, {"metrics.listen", cfg.Metrics.Listen},
		{"log.level", cfg.Log.Level}, {"rollout.stage", strconv.Itoa(cfg.Rollout.Stage)},
		{"rollout.state_file", cfg.Rollout.StateFile}, {"rollout.auto_rollback", strconv.FormatBool(cfg.Rollout.AutoRollback)},
		{"rollout.shared", strconv.FormatBool(cfg.Rollout.Shared)},
	}
	for _, u := range cfg.Users {
		if u.Auth == config.AuthCert {
			lines = append(lines, [2]string{"users." + u.Name + ".auth", "cert cn=" + u.CertName()})
			continue
		}
		lines = append(lines, [2]string{"users." + u.Name + ".password", "(redacted)"})
	}
	for _, rt := range cfg.Routes {
		p := "routes." + rt.Name + "."
		lines = append(lines, [2]string{p + "database", rt.Database}, [2]string{p + "primary", rt.Primary.Address})
		for _, r := range rt.Replicas {
			lines = append(lines, [2]string{p + "replica", r.Address + " weight=" + strconv.Itoa(r.Weight)})
		}
		lines = append(lines,
			[2]string{p + "read_routing_mode", rt.ReadRouting.ReadRoutingMode},
			[2]string{p + "fallback_policy", rt.ReadRouting.FallbackPolicy},
			[2]string{p + "freshness_policy", rt.Freshness.FreshnessPolicy},
			[2]string{p + "max_replica_lag_ms", strconv.Itoa(rt.Freshness.MaxReplicaLagMS)},
			[2]string{p + "pool.size", strconv.Itoa(rt.Pool.Size)})
	}
	return lines
}
