#!/usr/bin/env bash
# check-image.sh — `make check-image`: build the container image
# (deploy/container/build.sh), then inside it, in a buildah working container
# run with chroot isolation (podman run is refused by this machine's
# RLIMIT_NOFILE limits):
#   kineticd --version
#   kineticd --check-config /etc/kineticd/kineticd.toml   -> "config ok"
# and check from the image's config that it runs as a numeric non-root user,
# exposes 6432 and 9930, and starts kineticd --config /etc/kineticd/kineticd.toml.
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

# Minimal: no shell and no package manager in the runtime image.
mnt=$("${BUILDAH[@]}" mount "$ctr")
for f in bin/sh usr/bin/sh bin/bash usr/bin/apt-get usr/bin/dpkg; do
	[ ! -e "$mnt/$f" ] || die "the runtime image has /$f"
done
"${BUILDAH[@]}" umount "$ctr" >/dev/null
say "size: $("${BUILDAH[@]}" images --format '{{.Size}}' "$ref" | head -n 1)"
say "ok"
