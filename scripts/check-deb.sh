#!/usr/bin/env bash
# make check-deb: install the package make deb built, use it, remove and
# purge it, as root.
#
#   scripts/check-deb.sh DEB VERSION     (VERSION: what kineticd --version says)
#
# It refuses to run where kineticd is already installed or left anything (a
# package known to dpkg, /usr/bin/kineticd, /etc/kineticd, /var/lib/kineticd,
# the user or group kineticd), and on any exit, failure included, it purges
# the package and removes whatever the purge left, so the machine ends as it
# was. Checked on the way:
#   - the package's version, architecture and conffiles;
#   - dpkg -i succeeds with no systemd running (postinst must not need it);
#   - kineticd --version prints VERSION; --check-config of the installed
#     /etc/kineticd/kineticd.toml prints "config ok", also as user kineticd,
#     and another user cannot read the file (it holds passwords);
#   - kineticd is a system user with no login shell;
#   - the installed unit is the repository's and systemd-analyze verify
#     accepts it in place;
#   - installing again (an upgrade) keeps the user;
#   - dpkg --remove keeps an edited conffile and the user, removes the binary;
#   - dpkg --purge removes the binary, the unit, /etc/kineticd, the user, the
#     group and the permission overrides.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deb=${1:?usage: check-deb.sh DEB VERSION}
version=${2:?usage: check-deb.sh DEB VERSION}
conf=/etc/kineticd/kineticd.toml
unit=/lib/systemd/system/kineticd.service

fail() {
	echo "check-deb: $*" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || fail "must run as root (dpkg -i)"
[ -f "$deb" ] || fail "$deb: no such package (make deb builds it)"
command -v systemd-analyze >/dev/null || {
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
}

# leftovers lists what of kineticd exists on this machine, one per line.
leftovers() {
	dpkg-query -W -f='package kineticd (${db:Status-Abbrev})\n' kineticd 2>/dev/null || true
	local p
	for p in /usr/bin/kineticd "$unit" /etc/kineticd /var/lib/kineticd; do
		[ ! -e "$p" ] || echo "$p"
	done
	getent passwd kineticd >/dev/null && echo "user kineticd"
	getent group kineticd >/dev/null && echo "group kineticd"
	for p in "$conf" /etc/kineticd; do
		dpkg-statoverride --list "$p" >/dev/null && echo "statoverride $p"
	done
	return 0
}

before=$(leftovers)
[ -z "$before" ] || fail "kineticd is already on this machine; not touching it:
$before"

cleanup() {
	local rc=$? left
	trap - EXIT
	if dpkg-query -W kineticd >/dev/null 2>&1; then
		dpkg --purge kineticd >/dev/null 2>&1 || dpkg --purge --force-all kineticd >/dev/null 2>&1 || true
	fi
	left=$(leftovers)
	if [ -n "$left" ]; then
		# None of this existed before the check started (see above).
		echo "check-deb: cleaning up what remained:" >&2
		echo "$left" >&2
		dpkg-statoverride --remove "$conf" >/dev/null 2>&1 || true
		dpkg-statoverride --remove /etc/kineticd >/dev/null 2>&1 || true
		userdel kineticd 2>/dev/null || true
		groupdel kineticd 2>/dev/null || true
		rm -rf /usr/bin/kineticd "$unit" /etc/kineticd /var/lib/kineticd
		[ "$rc" != 0 ] || rc=1
	fi
	exit "$rc"
}
trap cleanup EXIT

# expect WHAT WANT GOT
expect() {
	[ "$3" = "$2" ] || fail "$1: want '$2', got '$3'"
}

# The package itself.
expect "package name" kineticd "$(dpkg-deb --field "$deb" Package)"
expect "package version" "$(bash scripts/deb-version.sh "$version")" "$(dpkg-deb --field "$deb" Version)"
expect "package architecture" "$(dpkg --print-architecture)" "$(dpkg-deb --field "$deb" Architecture)"
expect "conffiles" "$conf" "$(dpkg-deb --info "$deb" conffiles)"

# Install. No systemd runs here: postinst must cope.
out=$(dpkg -i "$deb" 2>&1) || fail "dpkg -i $deb failed:
$out"
expect "status after dpkg -i" "install ok installed" "$(dpkg-query -W -f='${Status}' kineticd)"
expect "kineticd --version" "kineticd $version" "$(/usr/bin/kineticd --version)"
expect "kineticd --check-config $conf" "config ok" "$(kineticd --check-config "$conf")"
expect "--check-config as user kineticd" "config ok" "$(runuser -u kineticd -- /usr/bin/kineticd --check-config "$conf")"
if runuser -u nobody -- cat "$conf" >/dev/null 2>&1; then
	fail "$conf is readable by user nobody; it holds passwords"
fi
expect "$conf owner and mode" "root:kineticd 640" "$(stat -c '%U:%G %a' "$conf")"
expect "/etc/kineticd owner and mode" "root:kineticd 750" "$(stat -c '%U:%G %a' /etc/kineticd)"
pw=$(getent passwd kineticd) || fail "no user kineticd after dpkg -i"
IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
[ "$uid" -lt 1000 ] || fail "user kineticd has uid $uid: not a system user"
expect "group of user kineticd" "$(getent group kineticd | cut -d: -f3)" "$gid"
expect "shell of user kineticd" /usr/sbin/nologin "$shell"
expect "home of user kineticd" /var/lib/kineticd "$home"
cmp -s deploy/systemd/kineticd.service "$unit" || fail "$unit differs from deploy/systemd/kineticd.service"
out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit failed:
$out"
[ -z "$out" ] || fail "systemd-analyze verify $unit warns:
$out"

# Again: the upgrade path of postinst (the user exists, the overrides too).
out=$(dpkg -i "$deb" 2>&1) || fail "dpkg -i $deb a second time failed:
$out"
expect "uid of kineticd after reinstalling" "$uid" "$(id -u kineticd)"
expect "$conf after reinstalling" "root:kineticd 640" "$(stat -c '%U:%G %a' "$conf")"

# Remove: the edited conffile and the user stay, the program goes.
echo "# edited by check-deb" >>"$conf"
out=$(dpkg --remove kineticd 2>&1) || fail "dpkg --remove kineticd failed:
$out"
expect "status after dpkg --remove" "deinstall ok config-files" "$(dpkg-query -W -f='${Status}' kineticd)"
[ ! -e /usr/bin/kineticd ] || fail "/usr/bin/kineticd still there after dpkg --remove"
[ ! -e "$unit" ] || fail "$unit still there after dpkg --remove"
grep -q '^# edited by check-deb$' "$conf" || fail "dpkg --remove did not keep the edited $conf"
getent passwd kineticd >/dev/null || fail "dpkg --remove removed the user kineticd (only purge should)"

# Purge: nothing of kineticd remains.
out=$(dpkg --purge kineticd 2>&1) || fail "dpkg --purge kineticd failed:
$out"
left=$(leftovers)
[ -z "$left" ] || fail "left after dpkg --purge:
$left"
echo "check-deb: $deb (kineticd $version) installed, checked, removed and purged: ok"
