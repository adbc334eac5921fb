"""A release learning run's COCO numbers as a results file, when `LITE_LEARNING_RUN_OUT` names one.

The learning runs (test_retinanet_train.py, test_maskrcnn_train.py; `release`) assert AP50 bounds;
the APs a doc quotes come from the file such a run writes, e.g.

    LITE_LEARNING_RUN_OUT=benchmarks/results/2026-12-06-abc1234-learning-retinanet.json \\
      .venv/bin/python -m pytest -q -m release tests/vision/test_retinanet_train.py -k learns

The file records the test, the command, the commit, the machine (CPU model, cores, TensorFlow,
oneDNN, load average), the wall time and every validation scalar by step, as the benchmark
scripts' results files do. One run, one file: a second learning test under the same variable
would overwrite it, so name one test (`-k`).
"""

import datetime
import json
import os
import subprocess
import sys

ENV_VAR = "LITE_LEARNING_RUN_OUT"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from first_step import cpu_model  # noqa: E402  (standard library only)


def record(test, validation, steps, wall_s, **extra):
    """Writes the run to the path `LITE_LEARNING_RUN_OUT` names (nothing when it is unset).

    `validation`: {metric: {step: value}} (test_modes.read_scalars); `steps`: the run's training
    steps; `extra`: more JSON values (e.g. the untrained model's numbers). Returns the path.
    """
    path = os.environ.get(ENV_VAR)
    if not path:
        return None
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=import-outside-toplevel

    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    results = {
        "kind": "learning_run", "file": path, "test": test,
        "command": f"{ENV_VAR}={path} " + " ".join([os.path.basename(sys.executable)] + sys.argv),
        "commit": commit,
        "finished": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(),
                    "tensorflow": tf.__version__,
                    "onednn": bool(_pywrap_util_port.IsMklEnabled()),
                    "loadavg": list(os.getloadavg())},
        "train_steps": steps, "wall_s": wall_s,
        "validation": {name: {str(step): float(value) for step, value in sorted(by_step.items())}
                       for name, by_step in sorted(validation.items())},
        **extra}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    return path
