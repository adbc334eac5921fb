"""Trains `digits_cnn` for N steps with deterministic ops; prints oneDNN's state and the losses.

Spawned by tests/test_onednn.py with TF_ENABLE_ONEDNN_OPTS set per process (TensorFlow reads it
once, at import). Prints one JSON line: {"onednn": bool, "losses": [float, ...]}.
"""

import json
import sys

import lite_launcher as ll
from lite_launcher.commands import train as driver


def run(steps, model_dir):
    driver.configure_determinism()  # what runtime.deterministic_ops does in lite-train
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=import-outside-toplevel

    params = ll.get_exp_config("digits_cnn")
    params.override({"trainer": {"train_steps": steps, "steps_per_loop": 1,
                                 "summary_interval": 10**9, "checkpoint_interval": 10**9,
                                 "validation_interval": 10**9}})
    losses = []
    ll.run_experiment(distribution_strategy=ll.get_distribution_strategy("off"),
                      task=ll.get_task(params.task), mode="train", params=params,
                      model_dir=model_dir,
                      train_actions=[lambda out: losses.append(float(out["training_loss"]))])
    print(json.dumps({"onednn": bool(_pywrap_util_port.IsMklEnabled()), "losses": losses}))


if __name__ == "__main__":
    run(int(sys.argv[1]), sys.argv[2])
