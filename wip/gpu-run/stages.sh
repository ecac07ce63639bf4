#!/usr/bin/env bash
set -u
L=/tmp/l
tar xJf gpu-suite.txz -C /tmp; mkdir -p one-off && tar xJf one-off-c/parent.txz -C one-off
nvidia-smi -L > $L/gpu.txt 2>&1; date -u >> $L/gpu.txt
(cd wip/capture-modes && nvcc -o /tmp/relaxed relaxed.c -lcuda -lpthread && timeout 40 /tmp/relaxed) > $L/relaxed.txt 2>&1
(cd wip/step-memory && nvcc -o /tmp/memprobe probe.c -lcuda && timeout 40 /tmp/memprobe) > $L/step-memory.txt 2>&1
dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
export GRAPH_RT_CUBLAS=$(find $dirs /usr/local/cuda/lib64 -name 'libcublas.so.1[23]' 2>/dev/null | sort -r | head -1)
for t in tests::cublas::a_panic_inside_record_leaves_gemms_on_a_capturing_stream_refused \
  tests::cublas::a_panicking_step_closure_leaves_gemms_on_a_capturing_stream_refused \
  tests::cublas::a_step_and_a_binding_set_order_a_buffer_allocated_on_another_stream \
  tests::cudarc::a_cudarc_stream_leaves_cudarc_event_tracking_on_in_its_captures_unless_the_caller_opts_in \
  tests::lifetime::a_foreign_global_capture_survives_the_release_thread_releasing_meanwhile \
  tests::nccl::nccl_a_panic_inside_record_leaves_collectives_on_a_capturing_stream_refused; do
  timeout 60 one-off/parent-lib --include-ignored --exact $t --test-threads=1 > $L/parent-${t##*::}.log 2>&1
  echo "$t rc=$?" >> $L/parent.txt
done
OUT=$L /tmp/gpu-suite/run.sh tests > $L/suite.txt 2>&1
for i in 1 2 3; do
  timeout 30 one-off/parent-step-bench --bench > $L/step-parent-$i.log 2>&1
  timeout 30 /tmp/gpu-suite/benches/step --bench > $L/step-new-$i.log 2>&1
done
mkdir -p $L/san
GRAPH_RT_SANITIZE_DEADLINE=${SAN_DEADLINE:-250} GRAPH_RT_SANITIZE_TIMEOUT=90 OUT=$L/san \
  /tmp/gpu-suite/run.sh sanitize > $L/sanitize.txt 2>&1
