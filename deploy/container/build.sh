#!/usr/bin/env bash
# build.sh — `make image`: build deploy/container/Containerfile into local
# buildah storage (vfs) as localhost/kineticd:VERSION and localhost/kineticd:latest.
#
# Here no image registry is reachable, so the Containerfile's two base-image
# ARGs are overridden with images made from Debian packages
# (base-images.sh; made once, then kept), and the build stage gets the
# host's Go with --volume: the toolchain at /usr/local/go (read-only) and the
# host's module and build caches, so pg_query's C code is compiled once and
# reused by later builds. Set BUILDER_IMAGE / RUNTIME_IMAGE to build from
# other base images instead (then nothing is mounted).
#
# Installs buildah and debootstrap with apt-get when missing; runs as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

export PATH=$PATH:/usr/local/go/bin
IMAGE=${IMAGE:-localhost/kineticd}
VERSION=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
BUILDAH=(buildah --storage-driver vfs)

say() { printf 'image: %s\n' "$*"; }

missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null; }
fi

args=(--build-arg "VERSION=$VERSION")
if [ -z "${BUILDER_IMAGE:-}" ] && [ -z "${RUNTIME_IMAGE:-}" ]; then
	bash deploy/container/base-images.sh
	goroot=$(go env GOROOT)
	modcache=$(go env GOMODCACHE)
	gocache=$(go env GOCACHE)
	mkdir -p "$modcache" "$gocache"
	args+=(--build-arg BUILDER_IMAGE=localhost/kineticd-build-base:bookworm
		--build-arg RUNTIME_IMAGE=localhost/kineticd-runtime-base:bookworm
		--pull=false
		--volume "$goroot:/usr/local/go:ro"
		--volume "$modcache:/go/pkg/mod"
		--volume "$gocache:/root/.cache/go-build")
else
	args+=(--build-arg "BUILDER_IMAGE=${BUILDER_IMAGE:?set both BUILDER_IMAGE and RUNTIME_IMAGE}"
		--build-arg "RUNTIME_IMAGE=${RUNTIME_IMAGE:?set both BUILDER_IMAGE and RUNTIME_IMAGE}")
fi

say "building $IMAGE:$VERSION"
"${BUILDAH[@]}" bud --isolation chroot --quiet \
	-f deploy/container/Containerfile --ignorefile deploy/container/Containerfile.dockerignore \
	"${args[@]}" -t "$IMAGE:$VERSION" -t "$IMAGE:latest" . >/dev/null
# Earlier builds: other version tags of $IMAGE, and images left untagged.
"${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' | { grep "^$IMAGE:" || true; } | while read -r ref; do
	case $ref in "$IMAGE:$VERSION" | "$IMAGE:latest") ;; *) "${BUILDAH[@]}" rmi "$ref" >/dev/null ;; esac
done
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
say "built $IMAGE:$VERSION and $IMAGE:latest"
