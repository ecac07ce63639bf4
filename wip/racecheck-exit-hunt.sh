#!/usr/bin/env bash
# Hunts the racecheck exit-11 flake (wip/README.md) with a tracer: runs `run.sh sanitize` under
# racecheck alone, pass after pass, until SECONDS (default 500) have gone, with segv-trace.so
# (wip/segv-trace.c; built beside this script, or here with cc) preloaded into every process, so
# that a process that faults says where. Usage: racecheck-exit-hunt.sh OUT [SECONDS]
# (the suite unpacked in /tmp: tar xJf gpu-suite.txz -C /tmp). OUT gets each pass's summary and
# the logs of its failures, and segv-*.txt of every fault.
out=$1; budget=${2:-500}
here=$(cd "$(dirname "$0")" && pwd)
so=$here/segv-trace.so
[ -f "$so" ] || cc -O1 -g -shared -fPIC -o "$so" "$here/segv-trace.c" -ldl || { echo "no segv-trace.so"; exit 2; }
mkdir -p "$out/traces"
end=$((SECONDS + budget))
pass=0
while [ $((SECONDS + 90)) -lt "$end" ]; do
  pass=$((pass + 1))
  mkdir -p "$out/pass-$pass"
  OUT=$out/pass-$pass GRAPH_RT_SANITIZE_TOOLS=racecheck GRAPH_RT_SANITIZE_DEADLINE=$((end - SECONDS - 30)) \
    SEGV_TRACE_DIR=$out/traces LD_PRELOAD=$so /tmp/gpu-suite/run.sh sanitize >"$out/pass-$pass/run.txt" 2>&1
  echo "pass $pass: $(grep -E '^sanitize racecheck' "$out/pass-$pass/run.txt" | tail -1)"
  grep -E '^(exit-|crashed|failed|timeout|findings|no-|unfinished)' "$out/pass-$pass/sanitize-racecheck.log"
done
echo "passes: $pass; traces: $(ls "$out/traces" | wc -l)"
grep -l "segv-trace" "$out"/pass-*/sanitize-racecheck.log 2>/dev/null
exit 0
