#!/usr/bin/env bash
# rate.sh DIR FUZZTIME [pkg...]: fresh corpus cache per target, prints steady rate.
cd "$1"; ft=$2; shift 2
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || mapfile -t pkgs < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u | sed 's|^|./|')
go test -run='^$' -list='^Fuzz' "${pkgs[@]}" | awk '/^Fuzz/ { names = names " " $1; next } /^ok/ { n = split(names, a, " "); for (i = 1; i <= n; i++) print $2, a[i]; names = "" }' |
grep -E "${ONLY:-.}" | while read -r pkg name; do
  c=$(mktemp -d); log=$(mktemp)
  TIMEFORMAT='%U %S'; cpu=$( { time go test -run='^$' -fuzz="^${name}\$" -fuzztime=$ft -fuzzminimizetime=200x "$pkg" -args -test.fuzzcachedir=$c >$log 2>&1 || { echo "FAIL $name" >&2; tail -30 $log >&2; } ; } 2>&1 | tail -1 | awk '{print $1+$2}')
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | tr -dc 0-9)
  el=$(grep -o 'elapsed: [0-9]*s' "$log" | tail -1 | tr -dc 0-9)
  # interval rates after warm-up, excluding the trailing 0/sec repeats
  rates=$(grep -o 'execs: [0-9]* ([0-9]*/sec)' $log | sed 's/.*(\([0-9]*\)\/sec)/\1/' | awk '$1>0' | sort -n | tr '\n' ' ')
  printf '%-26s %-22s %8s %4ss %7s cpu %6ss %7s/cpu-s  intervals: %s\n' $name ${pkg#goinfer/} "$execs" "$el" $(( ${execs:-0} / (${el:-1}>0?${el:-1}:1) )) "$cpu" "$(awk -v e=${execs:-0} -v c=$cpu 'BEGIN{printf "%d", e/c}')" "$rates"
  rm -rf $c $log
done
