#!/usr/bin/env bash
# pg-regress.sh: PostgreSQL's own regression suite for the installed server,
# ready to run against an existing instance (test/conformance's
# TestPgRegress). Prints the directory that holds it:
#   DIR/regress      src/test/regress of the same release (sql/, expected/,
#                    data/, parallel_schedule)
#   DIR/lib          regress.so, built against the installed server's headers
#   DIR/pg_regress   the driver (from the postgresql-15 package)
#   DIR/source-version  the Debian version the scripts come from
#
# The source comes from Debian's archive (the only place this machine
# reaches that has it): the orig tarball of the installed package's
# version or of a pinned one (below), checked against the SHA-256 its .dsc
# lists. The directory is
# world-readable because the servers (user postgres) read its data files
# (COPY ... FROM a file) and load regress.so. Run again, it does nothing.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CACHE=${PG_REGRESS_CACHE:-/var/tmp/pg-kinetic}
ARCHIVE=${DEBIAN_ARCHIVE:-http://deb.debian.org/debian}

# The regression suite of the installed package's release, or failing that
# (the archive here serves security updates' binaries but not their
# sources) of 15.18, pinned: within one major release the suite barely
# changes, and TestPgRegress compares kineticd with the same server
# directly, not with the expected files.
installed=$(dpkg-query -W -f='${Version}' postgresql-15) # 15.20-0+deb12u1
pinned=15.18-0+deb12u1
pinnedSHA=11df0df97fe3ea4ba9a791faaf39cee1d2fe571e78885b5b55d8517d27c323b4
dir="$CACHE/pg-regress-$installed"
if [[ -f "$dir/ready" ]]; then
	echo "$dir"
	exit 0
fi

pgxs=$("$PGBIN/pg_config" --pgxs 2>/dev/null || true)
if [[ -z "$pgxs" || ! -d /usr/include/postgresql/15/server ]]; then
	echo "pg-regress.sh: the server headers are missing; run scripts/install-deps.sh (postgresql-server-dev-15)" >&2
	exit 1
fi

tmp=$(mktemp -d "$CACHE.XXXXXX" 2>/dev/null || { mkdir -p "$CACHE" && mktemp -d "$CACHE.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
debver=
for cand in "$ARCHIVE/pool/main/p/postgresql-15 $installed" \
	"$ARCHIVE-security/pool/updates/main/p/postgresql-15 $installed" \
	"$ARCHIVE/pool/main/p/postgresql-15 $pinned"; do
	read -r pool v <<<"$cand"
	if curl -fsS --retry 2 -m 120 -o "$tmp/dsc" "$pool/postgresql-15_${v/+/%2B}.dsc" 2>/dev/null; then
		debver=$v
		break
	fi
done
if [[ -z "$debver" ]]; then
	echo "pg-regress.sh: no source of postgresql-15 $installed or $pinned in $ARCHIVE" >&2
	exit 1
fi
upver=${debver%%-*} # 15.18
tarball="postgresql-15_$upver.orig.tar.bz2"
want=$(awk -v f="$tarball" '/^Checksums-Sha256:/{s=1; next} /^[^ ]/{s=0} s && $3==f {print $1}' "$tmp/dsc")
if [[ "$debver" == "$pinned" && "$want" != "$pinnedSHA" ]]; then
	echo "pg-regress.sh: the .dsc of $pinned lists SHA-256 $want for $tarball, not $pinnedSHA" >&2
	exit 1
fi
if [[ -z "$want" ]]; then
	echo "pg-regress.sh: $pool/postgresql-15_$debver.dsc lists no SHA-256 for $tarball" >&2
	exit 1
fi
curl -fsS --retry 3 -m 600 -o "$tmp/$tarball" "$pool/$tarball"
got=$(sha256sum "$tmp/$tarball" | cut -d' ' -f1)
if [[ "$got" != "$want" ]]; then
	echo "pg-regress.sh: $tarball has SHA-256 $got, its .dsc says $want" >&2
	exit 1
fi
tar -xjf "$tmp/$tarball" -C "$tmp" "postgresql-$upver/src/test/regress"
mkdir -p "$tmp/out/lib"
mv "$tmp/postgresql-$upver/src/test/regress" "$tmp/out/regress"
cp "$tmp/out/regress/regress.c" "$tmp/out/lib/"
printf 'MODULES = regress\nPG_CONFIG = %s\nPGXS := %s\ninclude $(PGXS)\n' "$PGBIN/pg_config" "$pgxs" >"$tmp/out/lib/Makefile"
make -s -C "$tmp/out/lib" with_llvm=no >/dev/null
cp "$(dirname "$pgxs")/../../src/test/regress/pg_regress" "$tmp/out/pg_regress"
chmod -R a+rX "$tmp/out"
echo "$debver" >"$tmp/out/source-version"
touch "$tmp/out/ready"
mkdir -p "$CACHE"
rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "$dir"
