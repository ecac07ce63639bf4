#!/usr/bin/env bash
# One device call (carry: gpu-suite.txz): the suite's examples and candle's tests, then
# initcheck, memcheck and synccheck over every GPU test (racecheck and the tests ran in
# next-c.sh on the same build); logs in $OUT/d.tgz.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/ld; mkdir -p $L/san
nvidia-smi -L > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
OUT=$L timeout ${D_SUITE_TIMEOUT:-80} $G/run.sh examples candle > $L/suite-d.txt 2>&1
date -u >> $L/gpu.txt
GRAPH_RT_SANITIZE_TOOLS="initcheck memcheck synccheck" GRAPH_RT_SANITIZE_DEADLINE=${SAN_DEADLINE:-220} \
  GRAPH_RT_SANITIZE_TIMEOUT=150 OUT=$L/san timeout ${D_SAN_TIMEOUT:-250} $G/run.sh sanitize > $L/sanitize.txt 2>&1
date -u >> $L/gpu.txt
for f in $L/san/*.log; do [ $(stat -c %s "$f") -gt 3000000 ] && { head -c 3000000 "$f" > "$f.cut"; mv "$f.cut" "$f"; }; done
tar czf $OUT/d.tgz -C /tmp ld
cat $L/gpu.txt; grep "^example\|^candle\|PASS\|FAIL" $L/suite-d.txt | cut -c1-200; head -1 $L/san/sanitize-*.log; tail -n 7 $L/sanitize.txt
