#!/usr/bin/env bash
# fuzz.sh: run every fuzz target of the packages given (default ./...), one after the other, each
# for a budget of executions rather than a duration, and every one of them even when one fails;
# at the end, name the targets that failed and exit 1.
#
#   tools/fuzz.sh [PACKAGE...]          FUZZTIME=1m means about a minute per target
#   tools/fuzz.sh measure [PACKAGE...]  measure each target's execs/s, for tools/fuzz-rates.txt
#
# Why counts: with a duration (-fuzztime 10s) Go 1.26's fuzz coordinator can fail a target with
# "context deadline exceeded" and no failing input, when the deadline races the workers' shutdown
# (go.dev/issue/75804, fixed in Go 1.27). A count (-fuzztime 100000x) has no deadline to race, so
# a failure is a failing input.
#
# How FUZZTIME maps to counts: tools/fuzz-rates.txt holds each target's execs/s measured on the
# project's 2-core machine (tools/fuzz.sh measure > tools/fuzz-rates.txt rewrites it); a target
# gets rate x FUZZTIME executions (at least 1000), so FUZZTIME=10s is about 10 s per target there,
# and the same work, however long, elsewhere. A target not in the table gets DEFAULT_RATE. FUZZTIME
# is a duration of whole seconds, minutes and hours (10s, 1m, 1m30s, 2h), or a count for every
# target (5000x).
set -u

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
here=$(cd "$(dirname "$0")" && pwd)
RATES=${FUZZ_RATES:-$here/fuzz-rates.txt}
DEFAULT_RATE=${DEFAULT_RATE:-2000}
MIN_COUNT=1000
MEASURE_TIME=${MEASURE_TIME:-10s}

mode=run
if [ "${1:-}" = measure ]; then
	mode=measure
	shift
fi
[ $# -gt 0 ] || set -- ./...

# seconds DURATION prints the whole seconds of a duration such as 90s, 1m30s or 2h.
seconds() {
	local d=$1 total=0 n unit
	[[ $d =~ ^([0-9]+[hms])+$ ]] || return 1
	while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
		n=$((10#${BASH_REMATCH[1]})) unit=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
		case $unit in
		h) total=$((total + n * 3600)) ;;
		m) total=$((total + n * 60)) ;;
		s) total=$((total + n)) ;;
		esac
	done
	echo "$total"
}

count=
if [[ $FUZZTIME =~ ^[0-9]+x$ ]]; then
	count=${FUZZTIME%x}
elif ! secs=$(seconds "$FUZZTIME") || [ "$secs" -eq 0 ]; then
	echo "fuzz.sh: FUZZTIME=$FUZZTIME: want a duration of whole seconds, minutes or hours (10s, 1m30s) or a count (5000x)" >&2
	exit 2
fi

# targets prints "package target" for every fuzz target; a package whose tests do not build is
# printed as "package -".
targets() {
	local pkg list
	for pkg in $("$GO" list "$@"); do
		if ! list=$("$GO" test -list '^Fuzz' "$pkg" 2>&1); then
			echo "$list" >&2
			echo "$pkg -"
			continue
		fi
		grep '^Fuzz' <<<"$list" | sed "s|^|$pkg |"
	done
}

if [ $mode = measure ]; then
	# One run of MEASURE_TIME per target; the coordinator's last progress line gives the rate.
	# These runs use a duration, so one may end in the deadline race: only its log matters here.
	# Minimization is off: a worker minimizing a new input reports its executions only when it
	# is done, which would read as a stall. In a counted run they count toward the budget.
	echo "# execs/s of each fuzz target on the project's $(nproc)-core machine, read by tools/fuzz.sh: a target gets"
	echo "# rate x FUZZTIME executions. Rewrite with: tools/fuzz.sh measure > tools/fuzz-rates.txt"
	targets "$@" | while read -r pkg f; do
		[ "$f" = - ] && continue
		log=$("$GO" test -run='^$' -fuzz="^$f\$" -fuzztime="$MEASURE_TIME" -fuzzminimizetime=0 "$pkg" </dev/null 2>&1)
		rate=$(grep -o 'elapsed: [0-9]*s, execs: [0-9]*' <<<"$log" | tail -1 |
			awk '{ s = $2 + 0; if (s > 0) printf "%d", $4 / s }')
		echo "measure $pkg $f: ${rate:-?} execs/s" >&2
		[ -n "$rate" ] && [ "$rate" -gt 0 ] && echo "$pkg $f $rate"
	done
	exit 0
fi

failed=()
ran=0
while read -r pkg f; do
	if [ "$f" = - ]; then
		failed+=("$pkg (its tests do not build)")
		continue
	fi
	n=$count
	if [ -z "$n" ]; then
		rate=$(awk -v p="$pkg" -v f="$f" '$1 == p && $2 == f { print $3 }' "$RATES" 2>/dev/null)
		note="$rate execs/s measured"
		if [ -z "$rate" ]; then
			rate=$DEFAULT_RATE
			note="no measured rate in $(basename "$RATES"), $rate execs/s assumed"
		fi
		n=$((rate * secs))
		[ "$n" -ge $MIN_COUNT ] || n=$MIN_COUNT
		echo "fuzz $pkg $f: ${n}x, about $FUZZTIME ($note)"
	else
		echo "fuzz $pkg $f: ${n}x"
	fi
	ran=$((ran + 1))
	"$GO" test -run='^$' -fuzz="^$f\$" -fuzztime="${n}x" "$pkg" </dev/null || failed+=("$pkg $f")
done < <(targets "$@")

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#failed[@]} failed (of $ran targets run):"
	printf '  %s\n' "${failed[@]}"
	echo "A failing input is under the package's testdata/fuzz/<target>/; go test -run=<target>/<file> replays it."
	exit 1
fi
echo "fuzz: all $ran targets passed"
