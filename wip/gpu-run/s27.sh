#!/usr/bin/env bash
# One short device call (carry: gpu-suite.txz), most telling first, each part's log copied to
# $OUT as soon as it ends (the call may be cut off by the device budget): candle's tests (the
# two Llama blocks, the capture rules, the small step), then the library's step tests (copies
# rebound) and the NCCL copy test, then the two Llama blocks and their control under memcheck
# and racecheck.
set -u
cd "$(dirname "$0")/../.."
[ -d /tmp/gpu-suite ] || tar xJf gpu-suite.txz -C /tmp
G=/tmp/gpu-suite L=/tmp/l27; mkdir -p $L
nvidia-smi -L; date -u
OUT=$L/c timeout ${C_TIMEOUT:-110} $G/run.sh candle > $L/candle.txt 2>&1
cat $L/candle.txt $L/c/candle-*.log > $OUT/candle.log 2>&1
grep -h "kernel nodes\|^test \|panicked\|FAILED\|left:\|right:\|candle  " $L/candle.txt $L/c/candle-*.log | cut -c1-300 | head -60
date -u
dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
export GRAPH_RT_CUBLAS=$(find $dirs -name 'libcublas.so.1[23]' 2>/dev/null | sort -r | head -1)
export GRAPH_RT_NCCL=$(find $dirs -path '*nvidia/nccl/lib/libnccl.so.2' 2>/dev/null | head -1)
export NCCL_NVLS_ENABLE=0 NCCL_GRAPH_REGISTER=0 GRAPH_RT_BIN=$G/graph-rt
lib=$(ls $G/tests/graph-rt-lib-* | head -1)
timeout ${T_TIMEOUT:-60} $lib --include-ignored --test-threads=1 tests::step:: nccl_a_step_whose > $L/step.txt 2>&1
cp $L/step.txt $OUT/step.log
grep -E "^test |panicked|test result" $L/step.txt | grep -v " ok$" | cut -c1-300 | head -30
grep -E "test result" $L/step.txt
date -u
OUT=$L/s GRAPH_RT_CANDLE_SANITIZE_ONLY=llama_blocks GRAPH_RT_SANITIZE_TIMEOUT=${S_TIMEOUT:-100} timeout ${S_TOTAL:-120} $G/run.sh candle-sanitize > $L/san.txt 2>&1
cat $L/san.txt > $OUT/sanitize.log; grep -h "SUMMARY" $L/s/*.log >> $OUT/sanitize.log 2>/dev/null
tail -n 8 $L/san.txt; date -u
