package proxy

import "github.com/pg-kinetic/pg-kinetic/config"

// Targets and reasons use SPEC §8's vocabulary.
const (
	targetPrimary = "primary"
	targetReplica = "replica"

	reasonRoutingOff = "routing_off"
)

// decision is where a unit of work goes and why.
type decision struct {
	target  string
	address string
	reason  string
}

// decideSessionServer picks the server a session is bound to at startup.
// In session pooling that is always the route's primary: it is the server
// whose process ID the client is given (pg_backend_pid(), cancel), and the
// only server that accepts every statement. Per-unit routing to replicas
// (read_routing_mode prefer_replica/require_replica) is decided per unit on
// top of this binding and is not part of this release: with routing off
// every unit goes to the primary.
func decideSessionServer(r *config.Route) decision {
	return decision{target: targetPrimary, address: r.Primary.Address, reason: reasonRoutingOff}
}
