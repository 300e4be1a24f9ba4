#!/usr/bin/env bash
# The GPU check (tests/gpu) on a machine with a CUDA device, torch with NCCL and c4's
# dependencies importable: builds NCCL's Inspector plugin from each source folder given, in
# order, until one builds and matches the NCCL in torch, then runs the tests with it.
#   tests/gpu/run.sh [INSPECTOR_SOURCE_DIR...]
# C4_GPU_K: a pytest -k expression, to run some of the tests only.
# Results and the recorded NCCL output go to $OUT (default: a folder under /tmp).
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/artifacts"
python3 - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
PY
nvidia-smi -L || true
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
plugin=""
for src in "$@"; do
    build=$(mktemp -d)/$(basename "$src")
    cp -r "$src" "$build"
    if make -C "$build" CUDA_HOME="$CUDA_HOME" -j8 >"$OUT/build-$(basename "$src").log" 2>&1; then
        plugin=$build/libnccl-profiler-inspector.so
        echo "built $plugin"
        break
    fi
    echo "build of $(basename "$src") failed:"; tail -5 "$OUT/build-$(basename "$src").log"
done
export C4_TEST_INSPECTOR_PLUGIN=$plugin C4_TEST_ARTIFACTS=$OUT/artifacts
python3 -m pytest -p no:cacheprovider -rA -s ${C4_GPU_K:+-k "$C4_GPU_K"} tests/gpu 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
tar czf "$OUT/artifacts.tgz" -C "$OUT" artifacts && rm -rf "$OUT/artifacts"
exit "$rc"
