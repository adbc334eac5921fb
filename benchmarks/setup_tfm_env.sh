#!/usr/bin/env bash
# Creates a separate virtual environment with TensorFlow Model Garden (tf-models-official) for
# the side-by-side benchmark. TFM pins its own TensorFlow (~=2.20.0) and needs tf-keras, so it
# cannot share the project's environment (TensorFlow 2.21 / Keras 3).
#
# tf-models-official declares ~30 dependencies (COCO tools, OpenCV, Kaggle, text, ...) that the
# train_lib path never imports. It is installed with --no-deps, followed by exactly what
#   from official.core import train_lib, base_task, config_definitions, exp_factory, task_factory
#   import orbit
# imports, found by retrying that import in a bare environment and adding each missing module.
# official/core/input_reader.py imports tensorflow_datasets at module level, so TFDS and the few
# modules its top-level import needs come in too (with --no-deps: its own list pulls pyarrow etc.).
#
# By default the environment can also import TFM's vision package
# (`from official.vision import registry_imports`, what official/vision/train.py imports), which
# needs scipy, pycocotools, OpenCV and matplotlib; --no-vision leaves them out.
#
# lite_launcher (the repository this script sits in) is installed too, editable and --no-deps:
# its dependencies (tensorflow, keras>=3, gin-config, absl-py, numpy, pyyaml) are already there
# through TensorFlow 2.20, so lite_launcher and the raw loop can run on TFM's TensorFlow and the
# lite/TFM ratio compares launchers rather than TensorFlow releases.
#
# Usage: bash benchmarks/setup_tfm_env.sh [--no-vision] [VENV_DIR]   (default: .tfm_venv at the
# repo root). Takes a few minutes when the wheels are in pip's cache. Safe to rerun.
set -euo pipefail

with_vision=1
if [[ "${1:-}" == "--no-vision" ]]; then
  with_vision=0
  shift
fi
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-${repo_root}/.tfm_venv}"
python_bin="${PYTHON:-python3}"

echo "Creating ${venv_dir} with $(${python_bin} --version)"
"${python_bin}" -m venv "${venv_dir}"
pip=("${venv_dir}/bin/python" -m pip install --disable-pip-version-check --quiet)

# TFM's TensorFlow pin is ~=2.20.0; tf-keras must match TensorFlow's minor version. These come
# with their own dependencies (TensorFlow's list brings absl-py, numpy, protobuf, six, keras 3,
# ...). The vision packages are resolved in the same call, so that their numpy stays within
# TensorFlow's bounds.
vision_packages=()
if [[ "${with_vision}" == 1 ]]; then
  vision_packages=(scipy pycocotools opencv-python-headless matplotlib)
fi
"${pip[@]}" \
  "tensorflow==2.20.0" \
  "tf-keras==2.20.1" \
  "gin-config==0.5.0" \
  "pyyaml==6.0.4" \
  "keras>=3" \
  "${vision_packages[@]}"

# Without dependencies: TFM itself, then what its import path needs beyond the above.
"${pip[@]}" --no-deps \
  "tf-models-official==2.20.0" \
  "tensorflow-datasets==4.9.10" \
  "etils==1.15.0" \
  "toml==0.10.2" \
  "promise==2.3" \
  "tensorflow-metadata==1.21.0" \
  "tqdm==4.70.1" \
  "immutabledict==4.3.1"

# lite_launcher from this checkout; its dependencies are the ones installed above.
"${pip[@]}" --no-deps -e "${repo_root}"

echo "Checking the import path used by benchmarks/tfm_workloads.py"
"${venv_dir}/bin/python" -c '
from official.core import train_lib, base_task, config_definitions, exp_factory, task_factory
import orbit
import tensorflow as tf
import tf_keras
print("ok: tensorflow", tf.__version__, "tf_keras", tf_keras.__version__)
'
"${venv_dir}/bin/python" -c '
import keras
import lite_launcher as ll
ll.run_experiment  # resolves the lazy public API
print("ok: lite_launcher on keras", keras.__version__)
'
if [[ "${with_vision}" == 1 ]]; then
  "${venv_dir}/bin/python" -c '
from official.vision import registry_imports
print("ok: official.vision registry_imports")
'
fi
