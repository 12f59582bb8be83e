#!/usr/bin/env bash
# install-bench-deps.sh — install the proxies `make bench` compares kineticd
# with, on Debian/Ubuntu: PgBouncer (package pgbouncer, /usr/sbin/pgbouncer)
# and pgpool-II (package pgpool2, /usr/sbin/pgpool). Safe to run again: it
# installs only what is missing.
#
# The benchmark (test/bench/run) starts its own instances of both, as the
# postgres user on free ports in temp directories. The packages also enable
# system services (pgbouncer on 6432, pgpool2 on 5433, which would also bind
# a port the test clusters may want): they are stopped and disabled here so
# nothing but the benchmark's own instances run. Runs as root, or through
# sudo. scripts/install-deps.sh (PostgreSQL 15, pgbench) runs first.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

SCRIPT_NAME=install-bench-deps
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

packages=()
{ installed pgbouncer && [ -x /usr/sbin/pgbouncer ]; } || packages+=(pgbouncer)
{ installed pgpool2 && [ -x /usr/sbin/pgpool ]; } || packages+=(pgpool2)

if [ ${#packages[@]} -eq 0 ]; then
	say "pgbouncer and pgpool2 are installed"
else
	command -v apt-get >/dev/null 2>&1 ||
		die "missing ${packages[*]} and no apt-get here; install them by hand (/usr/sbin/pgbouncer, /usr/sbin/pgpool)"
	say "apt-get update"
	as_root apt-get update -q
	say "apt-get install ${packages[*]}"
	as_root apt-get install -y -q --no-install-recommends "${packages[@]}" ||
		die "apt-get install ${packages[*]} failed"
fi
for bin in /usr/sbin/pgbouncer /usr/sbin/pgpool; do
	[ -x "$bin" ] || die "$bin is still missing after installing packages"
done

# The distro services are not ours to keep running: they hold ports and
# would sit in the measurements. Without systemd (containers) the packages'
# init scripts may still have started them.
for svc in pgbouncer pgpool2; do
	if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
		as_root systemctl disable --now "$svc" >/dev/null 2>&1 || true
	elif [ -x "/etc/init.d/$svc" ]; then
		as_root "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
	fi
done
for pidfile in /var/run/postgresql/pgbouncer.pid /var/run/postgresql/pgpool.pid; do
	if [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2>/dev/null) && [ -n "$pid" ] &&
		grep -qE 'pgbouncer|pgpool' "/proc/$pid/comm" 2>/dev/null; then
		say "stopping the distro's $(cat "/proc/$pid/comm") (pid $pid)"
		as_root kill "$pid" || true
	fi
done
say "$(/usr/sbin/pgbouncer --version | head -1); $(/usr/sbin/pgpool --version 2>&1 | head -1)"
