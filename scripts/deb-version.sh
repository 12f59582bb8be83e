#!/usr/bin/env bash
# deb-version.sh VERSION: the Debian package version for a kineticd VERSION
# (the Makefile's, git describe --always --dirty), printed on stdout.
#
#   v1.2.3 or 1.2.3        -> 1.2.3
#   v1.2.3-4-gf3afb8e      -> 1.2.3+git4.f3afb8e    (4 commits after the tag)
#   f3afb8e (no tag yet)   -> 0.0.0~git276.f3afb8e  (276: commits in HEAD, so a
#                                                     later build sorts higher)
#   any of these + -dirty  -> the same + "+dirty"
#   dev (no git)           -> 0.0.0~dev
#
# "~" sorts before anything, so 0.0.0~git... is older than any tagged 0.0.0
# or later. A VERSION of another shape, or a result dpkg would refuse, is an
# error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

v=${1:?usage: deb-version.sh VERSION}
dirty=
if [[ $v == *-dirty ]]; then
	v=${v%-dirty}
	dirty=+dirty
fi
if [[ $v =~ ^v?([0-9]+(\.[0-9]+)*)$ ]]; then
	out=${BASH_REMATCH[1]}
elif [[ $v =~ ^v?([0-9]+(\.[0-9]+)*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
	out=${BASH_REMATCH[1]}+git${BASH_REMATCH[3]}.${BASH_REMATCH[4]}
elif [[ $v =~ ^[0-9a-f]{4,40}$ ]]; then
	count=$(git rev-list --count HEAD 2>/dev/null || echo 0)
	out=0.0.0~git$count.$v
elif [[ $v == dev ]]; then
	out=0.0.0~dev
else
	echo "deb-version.sh: cannot make a Debian version of '$1' (want vX.Y.Z, vX.Y.Z-N-gHASH, HASH or dev, each optionally -dirty)" >&2
	exit 1
fi
out=$out$dirty
if command -v dpkg >/dev/null && ! dpkg --validate-version "$out" 2>/dev/null; then
	echo "deb-version.sh: '$out' (from '$1') is not a valid Debian version" >&2
	exit 1
fi
echo "$out"
