#!/usr/bin/env bash
# One device call: the probes, the parent's behaviour on the new tests, the step bench of the
# parent and of HEAD interleaved, then the suite's tests and all four sanitizers.
set -u
cd "$(dirname "$0")/.."
L=/tmp/l; mkdir -p $L
timeout ${STAGES_TIMEOUT:-560} bash wip/gpu-run/stages.sh > $L/stages.txt 2>&1
for f in $L/san/sanitize-*.log $L/test-*.log; do [ -f "$f" ] && [ $(stat -c %s "$f") -gt 3000000 ] && { head -c 3000000 "$f" > "$f.cut"; mv "$f.cut" "$f"; }; done
tar czf $OUT/l.tgz -C /tmp l
cat $L/parent.txt; grep -hE "÷|validation" $L/step-*.log | head -20; head -70 $L/step-memory.txt; tail -n 30 $L/suite.txt; tail -n 12 $L/sanitize.txt
