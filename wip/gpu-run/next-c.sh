#!/usr/bin/env bash
# Device call C, on the machine calls A and B left warm: candle's decode comparison (issue 52:
# natural eager, capture-safe eager, graph-rt, cudarc's static copy; check, speed, serve,
# capture, long) alone on the GPU; its log in $OUT/c.log.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/lc; mkdir -p $L
nvidia-smi -L; date -u
OUT=$L timeout ${C_TIMEOUT:-560} $G/run.sh candle-decode > $L/decode.txt 2>&1
cp $L/decode.txt $OUT/c.log; cp $L/candle-decode.log $OUT/ 2>/dev/null
date -u; cat $L/decode.txt | tail -60
