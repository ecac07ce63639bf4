#!/usr/bin/env bash
# Builds one-off-c/parent.txz for run-1.sh: the parent commit's (9d8a541) release lib test
# binary with this session's six GPU tests of unsound paths added (they must fail there), and
# its `step` bench (the baseline of the step's host time with validation off). Run from the
# repository root, on any machine with Rust.
set -euo pipefail
root=$(pwd)
parent=${PARENT:-9d8a541}
wt=$(mktemp -d)/parent
target=${PARENT_TARGET:-$(mktemp -d)}
git worktree add -q --detach "$wt" "$parent"
trap 'git worktree remove --force "$wt"' EXIT
python3 - "$root/graph-rt/src/tests" "$wt/graph-rt/src/tests" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
tests = {
    "cublas.rs": ["a_panic_inside_record_leaves_gemms_on_a_capturing_stream_refused",
                  "a_panicking_step_closure_leaves_gemms_on_a_capturing_stream_refused",
                  "a_step_and_a_binding_set_order_a_buffer_allocated_on_another_stream"],
    "cudarc.rs": ["a_cudarc_stream_leaves_cudarc_event_tracking_on_in_its_captures_unless_the_caller_opts_in"],
    "lifetime.rs": ["a_foreign_global_capture_survives_the_release_thread_releasing_meanwhile"],
    "nccl.rs": ["nccl_a_panic_inside_record_leaves_collectives_on_a_capturing_stream_refused"],
}
def extract(text, name):
    i = text.index("fn " + name + "(")
    start = text.rindex("#[test]", 0, i)
    end = text.find("#[test]", i)
    return text[start:end if end != -1 else len(text)]
for f, names in tests.items():
    text = open(f"{src}/{f}").read()
    out = open(f"{dst}/{f}").read()
    for n in names:
        t = extract(text, n)
        # The parent has no validation option (and no validation at all).
        t = t.replace("    let options = StepOptions {\n        validation: Validation::off(),\n        ..StepOptions::default()\n    };\n",
                      "    let options = StepOptions::default();\n")
        out += "\n" + t
    if f == "cublas.rs":
        out = out.replace("use crate::{\n    CaptureMode,", "use crate::step::{Step, StepMode, StepOptions, StepParams};\nuse crate::{\n    CaptureMode,", 1)
    open(f"{dst}/{f}", "w").write(out)
PY
# The cudarc test uses helpers this session added to tests/cudarc.rs.
grep -q "fn add1_of" "$wt/graph-rt/src/tests/cudarc.rs" || python3 - "$root/graph-rt/src/tests/cudarc.rs" "$wt/graph-rt/src/tests/cudarc.rs" <<'PY'
import sys
src, dst = open(sys.argv[1]).read(), open(sys.argv[2]).read()
start = src.index("/// `add1(x, y, n)` of `kernels::CHAIN`, loaded through cudarc.")
end = src.index("#[test]", start)
dst = dst.replace("const N: usize = 4096;\n", "const N: usize = 4096;\n\n" + src[start:end], 1)
open(sys.argv[2], "w").write(dst)
PY
bins=$(cd "$wt" && CARGO_TARGET_DIR="$target" cargo test --release -p graph-rt --all-features --lib --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("reason")=="compiler-artifact" and m.get("executable")]')
bench=$(cd "$wt" && CARGO_TARGET_DIR="$target" cargo bench --no-run --bench step --message-format=json 2>/dev/null |
  python3 -c 'import json,sys; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("reason")=="compiler-artifact" and m.get("executable")]')
out=$(mktemp -d)
cp $bins "$out/parent-lib"
cp $bench "$out/parent-step-bench"
strip "$out"/*
mkdir -p "$root/one-off-c"
tar cJf "$root/one-off-c/parent.txz" -C "$out" parent-lib parent-step-bench
cp "$root/wip/gpu-run/run-1.sh" "$root/wip/gpu-run/stages.sh" "$root/one-off-c/"
sed -i 's#bash wip/gpu-run/stages.sh#bash one-off-c/stages.sh#' "$root/one-off-c/run-1.sh"
grep -qx '/one-off-c/' "$root/.git/info/exclude" 2>/dev/null || echo /one-off-c/ >>"$root/.git/info/exclude"
echo "one-off-c/parent.txz: $(du -h "$root/one-off-c/parent.txz" | cut -f1)"
