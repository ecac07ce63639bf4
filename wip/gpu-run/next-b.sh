#!/usr/bin/env bash
# Device call B, on the machine call A left warm: all four sanitizers over every GPU test, and
# beside them the two Llama blocks and their candle-only control under memcheck (leak check)
# and racecheck, and memcheck + racecheck of the step_memory example; logs in $OUT/b.tgz.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/lb; mkdir -p $L/san $L/candle
date -u > $L/gpu.txt
( timeout 300 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 --port 61000 --max-connections 16 $G/examples/step_memory --calls 3 > $L/san/example-memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/san/example-memcheck.log ) &
( timeout 300 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 --port 61100 --max-connections 16 $G/examples/step_memory --calls 3 > $L/san/example-racecheck.log 2>&1; echo "racecheck rc=$?" >> $L/san/example-racecheck.log ) &
( OUT=$L/candle GRAPH_RT_CANDLE_SANITIZE_ONLY=llama_blocks GRAPH_RT_SANITIZE_TIMEOUT=240 timeout 500 $G/run.sh candle-sanitize > $L/candle-sanitize.txt 2>&1 ) &
GRAPH_RT_SANITIZE_DEADLINE=${SAN_DEADLINE:-450} GRAPH_RT_SANITIZE_TIMEOUT=150 GRAPH_RT_SANITIZE_JOBS=12 OUT=$L/san \
  timeout 560 $G/run.sh sanitize > $L/sanitize.txt 2>&1
wait
date -u >> $L/gpu.txt
for f in $L/san/*.log $L/candle/*.log; do [ $(stat -c %s "$f") -gt 3000000 ] && { head -c 3000000 "$f" > "$f.cut"; mv "$f.cut" "$f"; }; done
tar czf $OUT/b.tgz -C /tmp lb
cat $L/gpu.txt; tail -n 8 $L/sanitize.txt; tail -n 6 $L/candle-sanitize.txt; tail -n 3 $L/san/example-memcheck.log $L/san/example-racecheck.log
