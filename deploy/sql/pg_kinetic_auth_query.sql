-- pg-kinetic: a lookup function for auth_query when the auth_user may not
-- read pg_shadow (managed services, or simply a role that is not a
-- superuser). Install it as a superuser (or the service's admin role) in
-- each database a route with auth_user connects to (the route's
-- backend_database), then set in kineticd.toml:
--
--   auth_user  = "kinetic_auth"          # a [[users]] entry
--   auth_query = "SELECT * FROM pgkinetic.user_lookup($1)"
--
-- With psql, naming your auth_user's role (default kinetic_auth):
--
--   psql -v auth_user=kinetic_auth -f pg_kinetic_auth_query.sql DBNAME
--
-- The function runs with its owner's rights (SECURITY DEFINER) and returns
-- one row, the role's name and its secret (a SCRAM verifier or md5 hash;
-- NULL when the role has no password), only for a role that may log in
-- and is not a superuser: kineticd never needs a superuser's secret, and
-- an md5 hash is as good as the password to whoever reads it. Only the
-- auth_user may call it. docs/operations.md, "auth_query", says why.

\if :{?auth_user}
\else
\set auth_user kinetic_auth
\endif

CREATE SCHEMA IF NOT EXISTS pgkinetic;

CREATE OR REPLACE FUNCTION pgkinetic.user_lookup(i_username text, OUT usename name, OUT passwd text)
RETURNS SETOF record
LANGUAGE sql STABLE STRICT SECURITY DEFINER
-- A SECURITY DEFINER function must not resolve names through a search_path
-- its caller controls.
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.usename, s.passwd
    FROM pg_catalog.pg_shadow s
    WHERE s.usename = i_username AND NOT s.usesuper
$$;

REVOKE ALL ON FUNCTION pgkinetic.user_lookup(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA pgkinetic TO :"auth_user";
GRANT EXECUTE ON FUNCTION pgkinetic.user_lookup(text) TO :"auth_user";
