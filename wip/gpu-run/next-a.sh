#!/usr/bin/env bash
# Device call A (carry: gpu-suite.txz, from `bash scripts/gpu-suite`): the suite's tests and examples,
# candle's tests, the step_memory bench and the step bench; logs in $OUT/a.tgz.
set -u
cd "$(dirname "$0")/../.."
tar xJf gpu-suite.txz -C /tmp
L=/tmp/l; mkdir -p $L
nvidia-smi -L > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
OUT=$L timeout ${A_SUITE_TIMEOUT:-420} /tmp/gpu-suite/run.sh tests examples candle > $L/suite-a.txt 2>&1
timeout 90 /tmp/gpu-suite/benches/step_memory --bench > $L/bench-step_memory.log 2>&1
timeout 60 /tmp/gpu-suite/benches/step --bench > $L/bench-step.log 2>&1
date -u >> $L/gpu.txt
tar czf $OUT/a.tgz -C /tmp l
cat $L/gpu.txt; tail -45 $L/suite-a.txt; grep -h "^step" $L/bench-step_memory.log $L/bench-step.log
