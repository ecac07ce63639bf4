#!/usr/bin/env bash
# One device call (carry: gpu-suite.txz): the step_memory bench on a quiet machine, the suite's
# tests, then all four sanitizers over every GPU test beside memcheck + racecheck of the
# step_memory example; logs in $OUT/c.tgz.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/lc; mkdir -p $L/san
nvidia-smi -L > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
timeout 60 $G/benches/step_memory --bench > $L/bench-step_memory.log 2>&1
date -u >> $L/gpu.txt
OUT=$L timeout ${C_TESTS_TIMEOUT:-170} $G/run.sh tests > $L/suite-tests.txt 2>&1
date -u >> $L/gpu.txt
( timeout 300 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 --port 61000 --max-connections 16 $G/examples/step_memory --calls 3 > $L/san/example-memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/san/example-memcheck.log ) &
( timeout 300 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 --port 61100 --max-connections 16 $G/examples/step_memory --calls 3 > $L/san/example-racecheck.log 2>&1; echo "racecheck rc=$?" >> $L/san/example-racecheck.log ) &
GRAPH_RT_SANITIZE_DEADLINE=${SAN_DEADLINE:-280} GRAPH_RT_SANITIZE_TIMEOUT=150 OUT=$L/san \
  timeout ${C_SAN_TIMEOUT:-310} $G/run.sh sanitize > $L/sanitize.txt 2>&1
wait
date -u >> $L/gpu.txt
for f in $L/san/*.log; do [ $(stat -c %s "$f") -gt 3000000 ] && { head -c 3000000 "$f" > "$f.cut"; mv "$f.cut" "$f"; }; done
tar czf $OUT/c.tgz -C /tmp lc
cat $L/gpu.txt; grep "^step_memory" $L/bench-step_memory.log; tail -n 24 $L/suite-tests.txt | grep -v "^test  *graph-rt-ptx\|0 failed"; tail -n 8 $L/sanitize.txt; tail -n 3 $L/san/example-memcheck.log $L/san/example-racecheck.log
