#!/usr/bin/env bash
# Device call A (carry: gpu-suite.txz, from `bash scripts/gpu-suite` then
# `bash wip/gpu-run/parent-bench.sh`): the suite's tests and examples, candle's tests, the step
# bench interleaved with the parent's (three runs each), the step_memory bench; logs in
# $OUT/a.tgz. Then next-b.sh (sanitizers) and next-c.sh (the decode comparison) on the same
# warm machine.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/l; mkdir -p $L
nvidia-smi -L > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
OUT=$L timeout ${A_SUITE_TIMEOUT:-330} $G/run.sh tests examples candle > $L/suite-a.txt 2>&1
date -u >> $L/gpu.txt
for i in 1 2 3; do
  [ -x $G/parent/step ] && timeout 35 $G/parent/step --bench > $L/bench-step-parent-$i.log 2>&1
  timeout 35 $G/benches/step --bench > $L/bench-step-head-$i.log 2>&1
done
timeout 60 $G/benches/step_memory --bench > $L/bench-step_memory.log 2>&1
date -u >> $L/gpu.txt
tar czf $OUT/a.tgz -C /tmp l
cat $L/gpu.txt; tail -50 $L/suite-a.txt
grep -H "^step: run\|÷ the same graph" $L/bench-step-*.log | cut -c1-400; grep -h "^step_memory" $L/bench-step_memory.log
