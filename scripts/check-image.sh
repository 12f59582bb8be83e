#!/usr/bin/env bash
# check-image.sh — `make check-image`: build the container image
# (deploy/container/build.sh), then inside it, in a buildah working container
# run with chroot isolation (podman run is refused by this machine's
# RLIMIT_NOFILE limits):
#   kineticd --version
#   kineticd --check-config /etc/kineticd/kineticd.toml   -> "config ok"
# and check from the image's config that it runs as a numeric non-root user,
# exposes 6432 and 9930, and starts kineticd --config /etc/kineticd/kineticd.toml;
# then run kineticd from the image with its config moved to free loopback
# ports and check /healthz (200), /readyz (503: no PostgreSQL behind it) and
# that the process runs as UID 65532.
# The working container is removed, whatever happens.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCRIPT_NAME=check-image
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

IMAGE=${IMAGE:-localhost/kineticd}
BUILDAH=(buildah --storage-driver vfs)

bash deploy/container/build.sh
ref=$IMAGE:latest

ctr=""
trap '[ -z "$ctr" ] || "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
ctr=$("${BUILDAH[@]}" from --pull=false --quiet "$ref")

run() { "${BUILDAH[@]}" run --isolation chroot "$ctr" -- "$@"; }

out=$(run /usr/bin/kineticd --version)
say "--version: $out"
[[ $out == "kineticd "* ]] || die "kineticd --version printed \"$out\""

out=$(run /usr/bin/kineticd --check-config /etc/kineticd/kineticd.toml 2>&1) ||
	die "kineticd --check-config failed in the image: $out"
say "--check-config /etc/kineticd/kineticd.toml: $out"
[ "$out" = "config ok" ] || die "kineticd --check-config printed \"$out\", want \"config ok\""

# buildah run uses the container's user, so this runs as the image's user.
out=$(run /usr/bin/kineticd --check-config /nonexistent.toml 2>&1) &&
	die "kineticd --check-config of a missing file succeeded: $out"

user=$("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$ref")
[[ $user =~ ^([0-9]+)(:([0-9]+))?$ ]] || die "image user \"$user\" is not numeric UID[:GID]"
[ "${BASH_REMATCH[1]}" -ne 0 ] || die "image user \"$user\" is root"
[ -z "${BASH_REMATCH[3]}" ] || [ "${BASH_REMATCH[3]}" -ne 0 ] || die "image group \"$user\" is root"
say "user: $user"

entry=$("${BUILDAH[@]}" inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$ref")
[ "$entry" = '/usr/bin/kineticd --config /etc/kineticd/kineticd.toml ' ] || die "entrypoint is $entry"
ports=$("${BUILDAH[@]}" inspect --type image --format '{{range $p, $v := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}' "$ref")
[[ " $ports" == *" 6432/tcp "* && " $ports" == *" 9930/tcp "* ]] || die "exposed ports are $ports"
say "entrypoint: $entry, ports: $ports"

# The image's kineticd serves: run it (the image's config on free loopback
# ports, copied into the working container) and ask /healthz and /readyz.
# No PostgreSQL is behind it, so /readyz must answer 503 with the config
# loaded and the listener accepting. The process must run as UID 65532.
command -v curl >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y curl >/dev/null
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 20000))
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	die "no free port found"
}
pg_port=$(free_port)
http_port=$(free_port)
runconf=$(mktemp /tmp/check-image-run.XXXXXX.toml)
mnt=$("${BUILDAH[@]}" mount "$ctr")
sed -e "s/^listen = \":6432\"\$/listen = \"127.0.0.1:$pg_port\"/" \
	-e "s/^listen = \":9930\"\$/listen = \"127.0.0.1:$http_port\"/" \
	"$mnt/etc/kineticd/kineticd.toml" >"$runconf"
"${BUILDAH[@]}" umount "$ctr" >/dev/null
[ "$(grep -c "^listen = \"127.0.0.1:" "$runconf")" = 2 ] || die "could not move the image config's listeners"
chmod 0644 "$runconf"
"${BUILDAH[@]}" copy "$ctr" "$runconf" /tmp/run.toml >/dev/null
rm -f "$runconf"
"${BUILDAH[@]}" run --isolation chroot "$ctr" -- /usr/bin/kineticd --config /tmp/run.toml >/tmp/check-image-run.log 2>&1 &
runpid=$!
stop_run() {
	kill -TERM "$runpid" 2>/dev/null || true
	wait "$runpid" 2>/dev/null || true
}
trap 'stop_run; [ -z "$ctr" ] || "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
health=""
for _ in $(seq 100); do
	health=$(curl -fsS "http://127.0.0.1:$http_port/healthz" 2>/dev/null) && break
	kill -0 "$runpid" 2>/dev/null || { cat /tmp/check-image-run.log >&2; die "kineticd in the image exited"; }
	sleep 0.1
done
[ "$health" = '{"status":"ok"}' ] || { cat /tmp/check-image-run.log >&2; die "/healthz answered \"$health\""; }
code=$(curl -sS -o /tmp/check-image-ready.json -w '%{http_code}' "http://127.0.0.1:$http_port/readyz")
[ "$code" = 503 ] && grep -q '"config":"loaded"' /tmp/check-image-ready.json &&
	grep -q '"listener":"accepting"' /tmp/check-image-ready.json ||
	die "/readyz answered $code $(cat /tmp/check-image-ready.json)"
uid=""
for pid in $(pgrep -P "$runpid" 2>/dev/null) $(pgrep -f -- '/usr/bin/kineticd --config /tmp/run.toml' 2>/dev/null); do
	if [ "$(readlink "/proc/$pid/exe" 2>/dev/null | xargs -r basename)" = kineticd ] || grep -q kineticd "/proc/$pid/comm" 2>/dev/null; then
		uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
	fi
done
[ "$uid" = 65532 ] || die "kineticd in the image runs as UID \"$uid\", want 65532"
stop_run
say "run: /healthz $health, /readyz 503 (no PostgreSQL behind it), process UID $uid"
rm -f /tmp/check-image-run.log /tmp/check-image-ready.json

# Minimal: no shell and no package manager in the runtime image.
mnt=$("${BUILDAH[@]}" mount "$ctr")
for f in bin/sh usr/bin/sh bin/bash usr/bin/apt-get usr/bin/dpkg; do
	[ ! -e "$mnt/$f" ] || die "the runtime image has /$f"
done
"${BUILDAH[@]}" umount "$ctr" >/dev/null
say "size: $("${BUILDAH[@]}" images --format '{{.Size}}' "$ref" | head -n 1)"
say "ok"
