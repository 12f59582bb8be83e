-- pg_kinetic_rollout.sql: the table through which every kineticd of a route
-- shares its rollout state ([rollout] shared = true, the default; see
-- docs/operations.md, "Rollout across instances").
--
-- kineticd creates it by itself when the role it logs in with (the first
-- [[users]] entry's backend user) may create a schema in the route's backend
-- database. Otherwise run this file once on each route's primary, in that
-- database, as its owner or a superuser, naming kineticd's role:
--
--   psql -d app -v kinetic_user=app -f deploy/sql/pg_kinetic_rollout.sql
--
-- It is idempotent. One row per route name: instances of one route must give
-- the route the same name. (The schema is pgkinetic, not pg_kinetic:
-- PostgreSQL reserves the pg_ prefix for system schemas.)

\set ON_ERROR_STOP on

CREATE SCHEMA IF NOT EXISTS pgkinetic;

CREATE TABLE IF NOT EXISTS pgkinetic.rollout_state (
	route       text PRIMARY KEY,                  -- [[routes]] name
	stage       integer NOT NULL CHECK (stage >= 0),
	rolled_back boolean NOT NULL,
	version     bigint NOT NULL CHECK (version > 0), -- +1 at every change (compare-and-set)
	changed_by  text NOT NULL,                     -- host and pid of the kineticd that wrote it
	changed_at  timestamptz NOT NULL DEFAULT now() -- informational only: conflicts go by version
);

GRANT USAGE ON SCHEMA pgkinetic TO :"kinetic_user";
GRANT SELECT, INSERT, UPDATE ON pgkinetic.rollout_state TO :"kinetic_user";
