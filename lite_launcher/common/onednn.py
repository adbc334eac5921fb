"""oneDNN's CPU kernels by default: the choice `lite-train` makes before TensorFlow loads.

TensorFlow's x86 builds carry oneDNN kernels (convolutions, matmuls, batch norm, pooling) but
turn them on by default only on CPUs with AVX-512 VNNI / BF16 or AMX; elsewhere (e.g. an AMD
EPYC with AVX2) they use Eigen's, whose convolution backprop is ~4x slower (ResNet-18 training
on 2 cores: ~1 vs ~3 steps/s, benchmarks/README.md). TensorFlow reads `TF_ENABLE_ONEDNN_OPTS`
once, when it loads, so the choice has to be made before `import tensorflow`.

Determinism: with `runtime.deterministic_ops` the loss curves of two runs with oneDNN on were
bit-identical (digits_cnn, and ResNet-style conv + batch-norm training, tests/test_onednn.py),
so oneDNN stays on under deterministic ops too.

oneDNN's results differ from Eigen's by float round-off (summation order); the digits_cnn loss
curve with and without it agrees to the tolerance tests/test_onednn.py states.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import MutableMapping, Optional

ENV_VAR = "TF_ENABLE_ONEDNN_OPTS"
# The machines whose TensorFlow builds carry oneDNN's x86 kernels.
_X86 = ("x86_64", "amd64", "x64")


def enable_by_default(environ: Optional[MutableMapping[str, str]] = None) -> str:
    """Sets `TF_ENABLE_ONEDNN_OPTS=1` unless the user chose, TensorFlow is loaded, or not x86.

    Where TensorFlow turns oneDNN on by itself, setting 1 changes nothing. On other machines
    (aarch64 builds decide for themselves) the variable is left alone.

    Returns why: 'set' (this call set it), 'user' (`TF_ENABLE_ONEDNN_OPTS` was already set, kept
    as it is), 'loaded' (TensorFlow is already imported: too late to choose), 'not_x86'.
    """
    environ = os.environ if environ is None else environ
    if ENV_VAR in environ:
        return "user"
    if "tensorflow" in sys.modules:
        return "loaded"
    if platform.machine().lower() not in _X86:
        return "not_x86"
    environ[ENV_VAR] = "1"
    return "set"
