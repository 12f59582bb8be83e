#!/usr/bin/env bash
# install-deps.sh — install what building and testing pg-kinetic needs on
# Debian/Ubuntu, then download the Go modules. Safe to run again: it installs
# only what is missing.
#
#   PostgreSQL 15   postgresql-15 (postgres, initdb, pg_basebackup, pgbench)
#                   and postgresql-client-15 (psql), in /usr/lib/postgresql/15/bin;
#                   test/pgtest starts its own servers from them.
#   C compiler      gcc + libc6-dev: cgo for pg_query_go and the race detector.
#   Go              not installed here; expected on PATH or in /usr/local/go.
#   Client drivers  for the compatibility tests in test/compat: psycopg2 and
#                   psycopg 3 (python3-psycopg2, python3-psycopg, for Debian's
#                   /usr/bin/python3), pgJDBC (libpostgresql-jdbc-java, i.e.
#                   /usr/share/java/postgresql.jar) and a JDK for javac/java,
#                   Node.js + npm, and node-postgres (`pg` from npm, pinned by
#                   test/compat/node/package-lock.json, into
#                   test/compat/node/node_modules).
#   Regression      PostgreSQL's own regression suite (src/test/regress of the
#                   release, from Debian's archive) and regress.so built with
#                   postgresql-server-dev-15, by scripts/pg-regress.sh into
#                   /var/tmp/pg-kinetic, for test/conformance.
#
# Runs as root, or through sudo. It never stops or reconfigures a system
# PostgreSQL service: if the package starts a cluster on 5432, it stays; the
# test harness uses free ports of its own.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PGBIN=/usr/lib/postgresql/15/bin
export DEBIAN_FRONTEND=noninteractive

SCRIPT_NAME=install-deps
# shellcheck source=scripts/lib.sh
source scripts/lib.sh # the cd above made the repository root current

# --- system packages -------------------------------------------------------
packages=()
if [ ! -x "$PGBIN/postgres" ] || [ ! -x "$PGBIN/initdb" ] || [ ! -x "$PGBIN/pg_basebackup" ] || [ ! -x "$PGBIN/pgbench" ]; then
	packages+=(postgresql-15)
fi
if [ ! -x "$PGBIN/psql" ]; then
	packages+=(postgresql-client-15)
fi
if ! command -v gcc >/dev/null 2>&1; then
	packages+=(gcc libc6-dev)
fi

if [ ${#packages[@]} -eq 0 ]; then
	say "PostgreSQL 15 ($PGBIN) and gcc are installed"
else
	command -v apt-get >/dev/null 2>&1 ||
		die "missing ${packages[*]} and no apt-get here; install them by hand (PostgreSQL 15 binaries must end up in $PGBIN)"
	say "apt-get update"
	as_root apt-get update -q
	say "apt-get install ${packages[*]}"
	as_root apt-get install -y -q --no-install-recommends "${packages[@]}" ||
		die "apt-get install ${packages[*]} failed; on releases without PostgreSQL 15 add the PGDG repository (https://wiki.postgresql.org/wiki/Apt)"
fi
for bin in postgres initdb pg_basebackup psql pgbench; do
	[ -x "$PGBIN/$bin" ] || die "$PGBIN/$bin is still missing after installing packages"
done
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
	die "no OS user 'postgres': the test harness runs PostgreSQL as that user when started as root (initdb refuses root)"
fi

# --- client drivers for test/compat ---------------------------------------
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
clients=()
installed python3-psycopg2 || clients+=(python3-psycopg2)
installed python3-psycopg || clients+=(python3-psycopg)
[ -f /usr/share/java/postgresql.jar ] || clients+=(libpostgresql-jdbc-java)
{ command -v javac >/dev/null 2>&1 && command -v java >/dev/null 2>&1; } || clients+=(default-jdk-headless)
# The server's headers, to build regress.so for PostgreSQL's own
# regression suite (test/conformance's TestPgRegress).
[ -d /usr/include/postgresql/15/server ] || clients+=(postgresql-server-dev-15)
command -v node >/dev/null 2>&1 || clients+=(nodejs)
# npm only when missing: NodeSource's nodejs ships its own npm and conflicts
# with Debian's package.
command -v npm >/dev/null 2>&1 || clients+=(npm)
if [ ${#clients[@]} -eq 0 ]; then
	say "client drivers (psycopg2, psycopg 3, pgJDBC, JDK, Node.js, npm) and the server headers are installed"
else
	command -v apt-get >/dev/null 2>&1 ||
		die "missing ${clients[*]} and no apt-get here; install them by hand (test/compat needs them)"
	say "apt-get update"
	as_root apt-get update -q
	say "apt-get install ${clients[*]}"
	as_root apt-get install -y -q --no-install-recommends "${clients[@]}" ||
		die "apt-get install ${clients[*]} failed"
fi
if [ ! -d test/compat/node/node_modules/pg ]; then
	say "npm ci in test/compat/node (node-postgres)"
	(cd test/compat/node && npm ci --no-audit --no-fund --loglevel=error) ||
		die "npm ci in test/compat/node failed"
fi

# --- PostgreSQL's regression suite for test/conformance --------------------
regress=$(scripts/pg-regress.sh) || die "scripts/pg-regress.sh failed"
say "PostgreSQL's regression suite: $regress"

# --- Go --------------------------------------------------------------------
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		say "go is not on PATH; using /usr/local/go/bin/go (add /usr/local/go/bin to PATH)"
		export PATH="$PATH:/usr/local/go/bin"
	else
		die "go not found. Install Go (the version in go.mod or newer) from https://go.dev/dl/ into /usr/local/go:
    curl -fsSL https://go.dev/dl/go1.26.0.linux-amd64.tar.gz | tar -C /usr/local -xz
    export PATH=\$PATH:/usr/local/go/bin"
	fi
fi
say "$(go version)"
say "go mod download"
go mod download
say "done"
