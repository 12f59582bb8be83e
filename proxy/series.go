package proxy

// The labelled metric series of a route that exist from start-up and
// after every reload, at 0 until their first event (admin.DeclareRoute),
// so that rate() in deploy/alerts.yml and deploy/grafana/kineticd.json
// reads 0 rather than "no data".

import (
	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
)

// fallbackReasons are the SPEC §8 reasons a read falls back to the primary
// for (isFallback); a read is rejected for the same ones or for
// fallback_overload.
var (
	fallbackReasons = []string{reasonReplicaUnavailable, reasonReadYourWrites, reasonStrictFresh, reasonLagExceeded,
		reasonLagUnknown, reasonSplitBrain, reasonTimelineChanged}
	rejectReasons = append(append([]string(nil), fallbackReasons...), reasonFallbackOverload)
	// retryCauses are kinetic_read_retries_total's cause words (forward.go).
	retryCauses = []string{"connection_lost", "unreachable"}
)

// routeSeries lists the series of rt to declare. Every route gets its
// fallback and rejection counters for every reason and its read retries
// for every replica and cause (cheap, and a rate() over them reads 0 even
// on a route that routes no reads). Decisions are declared where they are
// possible: a route with read_routing_mode = "off" sends every unit to the
// primary as routing_off; otherwise, per query class ("default" and the
// route's classes), a primary_only class's decisions are
// primary/class_primary_only, any other class's are replica/read,
// primary/<fallback reason> and rejected/<reject reason>, and the default
// class has primary/write.
func routeSeries(rt *config.Route) admin.RouteSeries {
	rs := admin.RouteSeries{Route: rt.Name, FallbackReasons: fallbackReasons, RejectReasons: rejectReasons,
		RetryCauses: retryCauses}
	for _, rep := range rt.Replicas {
		rs.RetryServers = append(rs.RetryServers, rep.Address)
	}
	if rt.ReadRouting.ReadRoutingMode == config.RoutingOff || rt.ReadRouting.ReadRoutingMode == "" {
		rs.Decisions = []admin.DecisionLabels{{QueryClass: admin.DefaultQueryClass, Target: targetPrimary, Reason: reasonRoutingOff}}
		return rs
	}
	rs.Decisions = append(rs.Decisions, admin.DecisionLabels{QueryClass: admin.DefaultQueryClass, Target: targetPrimary, Reason: reasonWrite})
	classes := []config.QueryClass{{Name: admin.DefaultQueryClass}}
	classes = append(classes, rt.QueryClasses...)
	for i, qc := range classes {
		if i > 0 && (qc.Routing == config.ClassPrimaryOnly || qc.Routing == "" || config.AlwaysPrimaryOnly(qc.Name)) {
			rs.Decisions = append(rs.Decisions, admin.DecisionLabels{QueryClass: qc.Name, Target: targetPrimary, Reason: reasonClassPrimaryOnly})
			continue
		}
		rs.Decisions = append(rs.Decisions, admin.DecisionLabels{QueryClass: qc.Name, Target: targetReplica, Reason: reasonRead})
		for _, r := range fallbackReasons {
			rs.Decisions = append(rs.Decisions, admin.DecisionLabels{QueryClass: qc.Name, Target: targetPrimary, Reason: r})
		}
		for _, r := range rejectReasons {
			rs.Decisions = append(rs.Decisions, admin.DecisionLabels{QueryClass: qc.Name, Target: targetRejected, Reason: r})
		}
	}
	return rs
}

// declareSeries declares the series of every route of cfg.
func (s *Server) declareSeries(cfg *config.Config) {
	for i := range cfg.Routes {
		s.metrics.DeclareRoute(routeSeries(&cfg.Routes[i]))
	}
}
