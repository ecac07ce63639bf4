#!/usr/bin/env bash
# How often does the racecheck exit-11 of
# tests::graphs::wrong_argument_size_update_is_an_error_and_the_old_arguments_stay recur?
# Runs it N times under racecheck, 14 at a time (as run.sh sanitize does), then the same test
# and its module plainly; exit codes to $1/rc-*.txt.
out=$1; n=${2:-42}
lib=$(ls /tmp/gpu-suite/tests/graph-rt-lib-* | head -1)
t=tests::graphs::wrong_argument_size_update_is_an_error_and_the_old_arguments_stay
mkdir -p "$out/flake"
for i in $(seq "$n"); do
  ( GRAPH_RT_SANITIZER=racecheck timeout -k 5 120 compute-sanitizer --tool racecheck --port $((49152 + (i % 14) * 16)) --max-connections 16 \
      --report-api-errors no --error-exitcode 9 "$lib" --include-ignored --exact "$t" --test-threads=1 >"$out/flake/race-$i.log" 2>&1
    echo "$i $?" >>"$out/rc-race.txt" ) &
  (( i % 14 == 0 )) && wait
done
wait
for i in $(seq "$n"); do
  ( timeout 60 "$lib" --include-ignored --exact "$t" --test-threads=1 >"$out/flake/plain-$i.log" 2>&1; echo "$i $?" >>"$out/rc-plain.txt" ) &
  (( i % 14 == 0 )) && wait
done
wait
echo "racecheck: $(awk '{print $2}' "$out/rc-race.txt" | sort | uniq -c | tr '\n' ' ')"
echo "plain: $(awk '{print $2}' "$out/rc-plain.txt" | sort | uniq -c | tr '\n' ' ')"
# keep only logs of failures
for f in "$out"/flake/*.log; do grep -q "test result: ok" "$f" && ! grep -q "didn't terminate" "$f" && rm -f "$f"; done
