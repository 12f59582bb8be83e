#!/usr/bin/env bash
# base-images.sh — make the two base images deploy/container/Containerfile
# is built from here, where no image registry is reachable, out of Debian's
# packages, into local buildah storage (vfs):
#
#   localhost/kineticd-build-base:bookworm    debootstrap --variant=minbase
#                                             bookworm + gcc + libc6-dev
#                                             (Go itself is mounted by build.sh)
#   localhost/kineticd-runtime-base:bookworm  FROM scratch + the files of the
#                                             libc6, libgcc-s1 and ca-certificates
#                                             packages, /etc/passwd with
#                                             nonroot (65532); no shell, no
#                                             package manager
#
# An image that already exists in local storage is kept: delete it
# (buildah --storage-driver vfs rmi NAME) to make it again. Needs root,
# buildah, debootstrap and apt-get (build.sh installs them).
set -euo pipefail

BUILD_BASE=${BUILD_BASE:-localhost/kineticd-build-base:bookworm}
RUNTIME_BASE=${RUNTIME_BASE:-localhost/kineticd-runtime-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILDAH=(buildah --storage-driver vfs)

say() { printf 'base-images: %s\n' "$*"; }

have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

work=$(mktemp -d /var/tmp/kineticd-base.XXXXXX)
ctr=""
cleanup() {
	if [ -n "$ctr" ]; then "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# commit_rootfs DIR IMAGE PATH_ENV: FROM scratch + DIR's tree, committed as IMAGE.
commit_rootfs() {
	local dir=$1 image=$2 path=$3
	tar -C "$dir" --numeric-owner -cf "$work/rootfs.tar" .
	ctr=$("${BUILDAH[@]}" from scratch)
	"${BUILDAH[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
	"${BUILDAH[@]}" config --env "PATH=$path" --created-by "deploy/container/base-images.sh" "$ctr"
	"${BUILDAH[@]}" commit --quiet "$ctr" "$image" >/dev/null
	"${BUILDAH[@]}" rm "$ctr" >/dev/null
	ctr=""
	rm -f "$work/rootfs.tar"
}

if have_image "$BUILD_BASE"; then
	say "$BUILD_BASE exists, kept"
else
	say "making $BUILD_BASE (debootstrap $SUITE from $MIRROR, a few minutes)"
	debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates \
		"$SUITE" "$work/build" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
	rm -rf "$work/build/var/cache/apt/archives/"*.deb "$work/build/var/lib/apt/lists/"*
	commit_rootfs "$work/build" "$BUILD_BASE" /usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	rm -rf "$work/build"
	say "$BUILD_BASE made"
fi

if have_image "$RUNTIME_BASE"; then
	say "$RUNTIME_BASE exists, kept"
else
	say "making $RUNTIME_BASE (libc6, libgcc-s1, ca-certificates from apt)"
	mkdir -p "$work/debs" "$work/rt"
	chmod 755 "$work" "$work/debs" # apt-get download runs as _apt
	(cd "$work/debs" && apt-get download libc6 libgcc-s1 ca-certificates >/dev/null)
	for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/rt"; done
	rt=$work/rt
	# ca-certificates builds its bundle in its postinst (update-ca-certificates),
	# which does not run here: concatenate the certificates it ships.
	mkdir -p "$rt/etc/ssl/certs"
	find "$rt/usr/share/ca-certificates" -name '*.crt' | sort | xargs cat >"$rt/etc/ssl/certs/ca-certificates.crt"
	test -s "$rt/etc/ssl/certs/ca-certificates.crt"
	# Documentation, manuals and the locales of libc6 are not needed.
	rm -rf "$rt/usr/share/doc" "$rt/usr/share/man" "$rt/usr/share/lintian" "$rt/usr/share/locale"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rt/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$rt/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rt/etc/nsswitch.conf"
	mkdir -p "$rt/tmp" "$rt/home/nonroot" "$rt/root"
	chmod 1777 "$rt/tmp"
	chown 65532:65532 "$rt/home/nonroot"
	chmod 700 "$rt/root"
	commit_rootfs "$rt" "$RUNTIME_BASE" /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	say "$RUNTIME_BASE made"
fi
