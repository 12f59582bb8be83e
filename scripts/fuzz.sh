#!/usr/bin/env bash
# make fuzz: run every fuzz target of a decoder the proxy runs on client
# bytes for FUZZTIME each (go test -fuzz takes one target per invocation, so
# they run one after another), print each target's exec count, and fail if
# any target fails. A failing input is written by go test to the package's
# testdata/fuzz/<Target>/ directory; this script names it, so it can be
# committed as a regression seed once the bug is fixed.
#
#   FUZZTIME      per target (default 10s; go test's -fuzztime syntax, so
#                 "500x" means 500 executions)
#   FUZZTARGETS   space-separated pkg:Target list replacing the default one
set -uo pipefail

cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
GO=${GO:-go}

# Client bytes, in the order a connection meets them: framing, the startup
# phase, authentication, the relay phase's messages and its pg_kinetic.*
# commands, the classifier and hints on statement text, tokens, the admin
# console's commands.
default_targets="
internal/wire:FuzzReadStartup
internal/wire:FuzzRelayFrames
proxy:FuzzAdmit
proxy:FuzzAuthExchange
proxy:FuzzFrontendMessage
proxy:FuzzStartupOptions
proxy:FuzzRelay
proxy:FuzzKineticCommand
classify:FuzzParseHints
classify:FuzzClassify
classify:FuzzScanShape
classify:FuzzShape
classify:FuzzSessionNeutral
freshness:FuzzParseToken
freshness:FuzzLSNRoundTrip
admin:FuzzExecute
"
targets=${FUZZTARGETS:-$default_targets}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
start=$(date +%s)
printf '%-16s %-22s %12s %s\n' package target execs result
for pt in $targets; do
	pkg=${pt%%:*}
	target=${pt##*:}
	before=$(ls "$pkg/testdata/fuzz/$target" 2>/dev/null | sort)
	t0=$(date +%s)
	$GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "./$pkg/" >"$log" 2>&1
	rc=$?
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
	result="ok ($(($(date +%s) - t0)) s)"
	after=$(ls "$pkg/testdata/fuzz/$target" 2>/dev/null | sort)
	new=$(comm -13 <(echo "$before") <(echo "$after"))
	if [ $rc -ne 0 ] && [ -z "$new" ] && grep -q '^    context deadline exceeded$' "$log"; then
		# The fuzzing engine itself ran out of time (it was minimizing a
		# new coverage input when FUZZTIME ended, a known failure mode of
		# go test -fuzz): no input failed, nothing to fix.
		rc=0
		result="ok ($(($(date +%s) - t0)) s; the engine's own deadline, no failing input)"
	fi
	if [ $rc -ne 0 ]; then
		result="FAILED"
		failed+=("$pkg:$target")
	fi
	printf '%-16s %-22s %12s %s\n' "$pkg" "$target" "${execs:-0}" "$result"
	if [ $rc -ne 0 ]; then
		sed 's/^/    /' "$log" | tail -40
		for f in $new; do
			echo "    new failing input: $pkg/testdata/fuzz/$target/$f"
			echo "    reproduce: $GO test -run '^$target/$f\$' ./$pkg/"
		done
	fi
done
echo "fuzz: $(echo $targets | wc -w) targets, FUZZTIME=$FUZZTIME, $(($(date +%s) - start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: FAILED: ${failed[*]}"
	exit 1
fi
