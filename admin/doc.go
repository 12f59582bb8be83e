// Package admin will own the admin console (database "pgkinetic") and the
// Prometheus metrics endpoint of SPEC §8. It is empty in this release: the
// [admin] and [metrics] configuration is parsed and validated, and nothing
// listens on metrics.listen yet.
package admin
