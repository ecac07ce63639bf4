#!/usr/bin/env bash
# Adds the `step` bench of a parent commit (PARENT, default 328adcd: before steps rebound
# copies, which added a check to Step::run's launch) to gpu-suite/parent/ and packs the suite
# again, so that next-a.sh runs both benches interleaved (issue 48: a step call's host time
# with validation off within the parent's spread). Run after `bash scripts/gpu-suite`, from the
# repository root.
set -euo pipefail
parent=${PARENT:-328adcd}
wt=$(mktemp -d)/parent
target=${PARENT_TARGET:-$(mktemp -d)}
git worktree add -q --detach "$wt" "$parent"
trap 'git worktree remove --force "$wt"' EXIT
(cd "$wt" && CARGO_TARGET_DIR="$target" cargo bench --no-run --features cudarc --bench step 2>&1 | tail -2)
mkdir -p gpu-suite/parent
cp "$(ls -t "$target"/release/deps/step-* | grep -v '\.d$' | head -1)" gpu-suite/parent/step
strip gpu-suite/parent/step
tar cf - gpu-suite | xz -T0 -6 > gpu-suite.txz
echo "gpu-suite.txz $(du -sm gpu-suite.txz | cut -f1) MiB, with the parent's step bench ($parent)"
