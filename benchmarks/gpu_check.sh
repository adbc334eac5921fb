#!/usr/bin/env bash
# GPU check, for a fresh GPU machine that holds only this repository:
#   1. a virtual environment with lite_launcher and TensorFlow's CUDA wheels
#      (`tensorflow[and-cuda]`), unless PYTHON names an interpreter that already has them;
#   2. the device TensorFlow sees (and nvidia-smi);
#   3. the XLA and mixed-precision tests (pytest -k, see TESTS below);
#   4. the benchmark's train rows on the GPU (benchmarks/gpu_rows.py): runtime.num_gpus=1,
#      XLA off and on, float32 / float16 / bfloat16, for cnn_small, mlp_tiny and mock;
#   5. the vision rows on the GPU (benchmarks/gpu_vision_rows.py): ResNet-18, ResNet-50 and
#      MobileNetV2 x float32 / float16 / bfloat16 x XLA off / on, input pipeline included.
# Everything it prints is also written under $OUT (default: bench_out/gpu_check/, ignored by git):
# gpu_check.log, devices.txt, nvidia-smi.txt, tests.txt, gpu_rows.json, gpu_rows.md,
# gpu_vision_rows.json, gpu_vision_rows.md.
# Sized to finish in under 8 minutes with the wheels downloadable: the rows stop starting new
# processes after ROWS_BUDGET_S (default 270) seconds and list the rest as skipped. Without
# network access, point PYTHON at an environment that has TensorFlow and lite_launcher.
#
# Usage: bash benchmarks/gpu_check.sh [--cpu-dry-run | --list]
#   --list         print the vision rows' processes (gpu_vision_rows.py --list) and exit.
#   --cpu-dry-run  the same steps on a machine without a GPU: no CUDA wheels, no GPU required,
#                  the rows tiny on the CPU (num_gpus=0). With PYTHON=.venv/bin/python it
#                  installs nothing.
# Environment: OUT, PYTHON, GPU_CHECK_VENV, TEST_WORKERS (default 4), ROWS_BUDGET_S (default
# 270), ROWS_ARGS (more gpu_rows.py options), VISION_BUDGET_S (default 240),
# VISION_ARGS (more gpu_vision_rows.py options, e.g. "--models resnet50 --dtypes bfloat16").
# Exit status: 0 when every step passed; else the number of failed steps (tests, rows, device).
set -uo pipefail

dry_run=0
if [[ "${1:-}" == "--cpu-dry-run" ]]; then
  dry_run=1
fi
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
if [[ "${1:-}" == "--list" ]]; then
  exec "${PYTHON:-python3}" benchmarks/gpu_vision_rows.py --list
fi
out="${OUT:-${repo_root}/bench_out/gpu_check}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Test workers share the GPU: each takes GPU memory as it needs it rather than all at once.
export TF_FORCE_GPU_ALLOW_GROWTH=true
mkdir -p "${out}"
exec > >(tee -a "${out}/gpu_check.log") 2>&1
started=$(date +%s)
failures=0
step() { echo; echo "== $* ($(( $(date +%s) - started )) s)"; }

# The tests that exercise XLA and mixed precision (test_trainer, test_distribution,
# test_strategy, test_optimization, test_examples).
TESTS="xla or mixed_precision or float16 or bfloat16 or loss_scal"

step "environment"
if [[ -n "${PYTHON:-}" ]]; then
  python_bin="${PYTHON}"
  echo "using ${python_bin} as it is (PYTHON is set)"
else
  venv="${GPU_CHECK_VENV:-${repo_root}/bench_out/gpu_venv}"
  python3 -m venv "${venv}" || exit 1
  python_bin="${venv}/bin/python"
  tf_spec="tensorflow[and-cuda]"
  if [[ "${dry_run}" == 1 ]]; then
    tf_spec="tensorflow"
  fi
  "${python_bin}" -m pip install --quiet --upgrade pip || exit 1
  # TensorFlow with its CUDA libraries first, then this repository with its test extras
  # (pytest, pytest-xdist) and tensorboard, which some tests read event files with.
  "${python_bin}" -m pip install --quiet "${tf_spec}" || exit 1
  "${python_bin}" -m pip install --quiet -e ".[test]" tensorboard || exit 1
fi
"${python_bin}" -c 'import tensorflow as tf, keras, lite_launcher
print("tensorflow", tf.__version__, "keras", keras.__version__, "lite_launcher",
      lite_launcher.__version__)' || exit 1

step "devices"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi | tee "${out}/nvidia-smi.txt"
fi
"${python_bin}" - <<'EOF' | tee "${out}/devices.txt"
import tensorflow as tf
print("GPUs:", tf.config.list_physical_devices("GPU"))
print("built with CUDA:", tf.test.is_built_with_cuda())
EOF
if [[ "${dry_run}" == 0 ]] && ! grep -q "PhysicalDevice(name='/physical_device:GPU" \
    "${out}/devices.txt"; then
  echo "FAILED: TensorFlow sees no GPU (see devices.txt); the rows would run on the CPU."
  failures=$((failures + 1))
fi

step "XLA and mixed-precision tests: -k '${TESTS}'"
# TEST_WORKERS pytest-xdist workers (default 4; 39 tests, ~4.5 min serial on 2 loaded cores).
"${python_bin}" -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" tests -k "${TESTS}" \
  2>&1 | tee "${out}/tests.txt"
if [[ "${PIPESTATUS[0]}" != 0 ]]; then
  echo "FAILED: tests (see tests.txt)"
  failures=$((failures + 1))
fi

step "train rows: num_gpus=1, XLA off/on, float32/float16/bfloat16"
rows_args=(--out "${out}" --budget_s "${ROWS_BUDGET_S:-270}")
if [[ "${dry_run}" == 1 ]]; then
  rows_args+=(--cpu)
fi
# ROWS_ARGS: more gpu_rows.py options, e.g. "--workloads mock --dtypes float16" for a short run.
read -r -a extra_rows_args <<< "${ROWS_ARGS:-}"
rows_args+=("${extra_rows_args[@]}")
if ! "${python_bin}" benchmarks/gpu_rows.py "${rows_args[@]}"; then
  echo "FAILED: some train rows (see gpu_rows.md / gpu_rows.json)"
  failures=$((failures + 1))
fi

step "vision rows: ResNet-18/50, MobileNetV2 x float32/float16/bfloat16 x XLA off/on"
vision_args=(--out "${out}" --python "${python_bin}" --budget_s "${VISION_BUDGET_S:-240}")
if [[ "${dry_run}" == 1 ]]; then
  vision_args+=(--cpu)
fi
read -r -a extra_vision_args <<< "${VISION_ARGS:-}"
vision_args+=("${extra_vision_args[@]}")
if ! "${python_bin}" benchmarks/gpu_vision_rows.py "${vision_args[@]}"; then
  echo "FAILED: some vision rows (see gpu_vision_rows.md / gpu_vision_rows.json)"
  failures=$((failures + 1))
fi

step "done: ${failures} failed step(s); results in ${out}"
exit "${failures}"
