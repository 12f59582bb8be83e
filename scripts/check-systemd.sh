#!/usr/bin/env bash
# make check-systemd: check deploy/systemd/kineticd.service.
#
#   scripts/check-systemd.sh BINARY
#
# systemd-analyze verify loads the unit with everything it depends on and
# checks that ExecStart= names an executable file. It prints warnings (an
# unknown key, a value that does not parse) and still exits 0, so any output
# at all is a failure here. It needs /usr/bin/kineticd to exist: instead of
# installing into the machine, the unit is verified under --root in a
# throwaway tree holding the system's units, BINARY as /usr/bin/kineticd and
# this unit where the package puts it. No running systemd is needed.
#
# Then what issue 15 asks of the unit, read from the file: Type=notify,
# ProtectSystem=strict, NoNewPrivileges, LimitNOFILE >= 65536, a SIGHUP
# reload, KillSignal=SIGTERM and TimeoutStopSec above the example config's
# shutdown_timeout_ms. The sandbox's exposure score is printed, for
# information.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

unit=deploy/systemd/kineticd.service
bin=${1:?usage: check-systemd.sh BINARY}
[ -x "$bin" ] || { echo "check-systemd: $bin is not an executable" >&2; exit 1; }

if ! command -v systemd-analyze >/dev/null; then
	[ "$(id -u)" = 0 ] || { echo "check-systemd: systemd-analyze is missing; as root: apt-get install systemd" >&2; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system

root=$(mktemp -d "${TMPDIR:-/tmp}/check-systemd.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/usr/lib/systemd" "$root/etc/kineticd"
cp -a "$units" "$root/usr/lib/systemd/system"
ln -s usr/lib "$root/lib"
ln -s usr/bin "$root/bin"
install -m 0755 "$bin" "$root/usr/bin/kineticd"
install -m 0644 "$unit" "$root/usr/lib/systemd/system/kineticd.service"
install -m 0640 deploy/kineticd.example.toml "$root/etc/kineticd/kineticd.toml"

fail=0
if ! out=$(systemd-analyze verify --root="$root" kineticd.service 2>&1) || [ -n "$out" ]; then
	echo "check-systemd: systemd-analyze verify $unit:" >&2
	echo "${out:-(no output, non-zero exit)}" >&2
	fail=1
fi

# The value of a [Service] key, the last assignment winning as in systemd.
key() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }
want() { # KEY VALUE
	local got
	got=$(key "$1")
	if [ "$got" != "$2" ]; then
		echo "check-systemd: $unit: want $1=$2, got '${got}'" >&2
		fail=1
	fi
}
want Type notify
want ProtectSystem strict
want NoNewPrivileges yes
want User kineticd
want KillSignal SIGTERM
want ExecStart "/usr/bin/kineticd --config /etc/kineticd/kineticd.toml"
if ! grep -qx 'ExecReload=/bin/kill -HUP \$MAINPID' "$unit"; then
	echo "check-systemd: $unit: no ExecReload=/bin/kill -HUP \$MAINPID" >&2
	fail=1
fi
nofile=$(key LimitNOFILE)
if ! [[ $nofile =~ ^[0-9]+$ ]] || [ "$nofile" -lt 65536 ]; then
	echo "check-systemd: $unit: LimitNOFILE=$nofile, want a number >= 65536" >&2
	fail=1
fi
stop=$(key TimeoutStopSec)
shutdown_ms=$(sed -n 's/^shutdown_timeout_ms *= *\([0-9]*\).*/\1/p' deploy/kineticd.example.toml)
stop_s=
[[ $stop =~ ^([0-9]+)s?$ ]] && stop_s=${BASH_REMATCH[1]}
if [ -z "$stop_s" ]; then
	echo "check-systemd: $unit: TimeoutStopSec=$stop, want whole seconds" >&2
	fail=1
elif ! [[ $shutdown_ms =~ ^[0-9]+$ ]] || [ $((stop_s * 1000)) -le "$shutdown_ms" ]; then
	echo "check-systemd: $unit: TimeoutStopSec=$stop is not above shutdown_timeout_ms=$shutdown_ms" >&2
	fail=1
fi

systemd-analyze security --offline=true --root="$root" kineticd.service 2>&1 | grep -a 'Overall exposure' || true
if [ "$fail" = 0 ]; then
	echo "check-systemd: $unit ok"
fi
exit "$fail"
