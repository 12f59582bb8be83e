# lib.sh — helpers the install scripts share. Set SCRIPT_NAME, then source.

say() { printf '%s: %s\n' "$SCRIPT_NAME" "$*"; }
die() { printf '%s: error: %s\n' "$SCRIPT_NAME" "$*" >&2; exit 1; }

# as_root runs a command as root: directly, or through sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo env DEBIAN_FRONTEND=noninteractive "$@"
	else
		die "need root to run: $* (re-run as root or install sudo)"
	fi
}
