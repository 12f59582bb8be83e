// Package health will run one probe loop per server (role, timeline, WAL
// positions, lag) and publish immutable verdict snapshots readers never
// block on (SPEC §5). It is empty in this release.
package health
