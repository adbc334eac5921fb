"""Runs the `lite-train` driver and saves what it trained, for tests/test_distribution.py.

    python lite_train_capture.py OUT.npz [lite-train flags...]

Runs `lite_launcher.commands.train.run()` (exactly what the `lite-train` command runs) with the flags,
then writes OUT.npz: the trained model's weights (`weight_0`, `weight_1`, ...), the trainer's
final `global_step`, `loss_counts`: the training-loss count of each inner loop, read in the
same graph just before the trainer resets it (exact counts show that no update was lost),
`fused`: whether the inner loops ran as one graph with the metric reads (the default path), and
for each evaluation `eval_global_step` and `eval_<name>` (its logs, in order). Exits with the
driver's exit code; OUT.npz is written only when the driver succeeded.

The trainer's hooks are not replaced, so it runs as a user's would: the one addition is a
`training_loss_count` entry in each inner loop's logs.
"""

import sys
import types

import numpy as np
import tensorflow as tf

from lite_launcher.commands import train as main
from lite_launcher.core import train_lib as experiment
from lite_launcher.core.base_trainer import Trainer

captured = {"trainer": None, "loss_counts": [], "evals": []}

_runner_run = experiment.ExperimentRunner.run
_loop_end_logs = Trainer._loop_end_logs


def loop_end_logs(self):
    # Read before the resets that follow (program order in the loop's graph).
    logs = {"training_loss_count": tf.convert_to_tensor(self.train_loss.count)}
    logs.update(_loop_end_logs(self))
    return logs


def runner_run(self):
    trainer = captured["trainer"] = self.trainer
    # Instance attributes wrapping the public entry points: they record what the Controller
    # gets back and change nothing the trainer runs.
    trainer.train = types.MethodType(train, trainer)
    trainer.evaluate = types.MethodType(evaluate, trainer)
    return _runner_run(self)


def train(self, num_steps):
    logs = Trainer.train(self, num_steps)
    captured["loss_counts"].append(float(logs["training_loss_count"]))
    return logs


def evaluate(self, num_steps):
    logs = Trainer.evaluate(self, num_steps)
    record = {"global_step": float(self.global_step.numpy())}
    record.update({k: float(v) for k, v in logs.items() if np.ndim(v) == 0})
    captured["evals"].append(record)
    return logs


def _main():
    out_path = sys.argv[1]
    sys.argv = ["lite-train"] + sys.argv[2:]
    experiment.ExperimentRunner.run = runner_run
    Trainer._loop_end_logs = loop_end_logs
    try:
        main.run()
        code = 0
    except SystemExit as exit_:
        code = exit_.code or 0
    if code == 0:
        trainer = captured["trainer"]
        arrays = {f"weight_{i}": w.numpy() for i, w in enumerate(trainer.model.weights)}
        arrays["global_step"] = np.int64(trainer.global_step.numpy())
        arrays["loss_counts"] = np.array(captured["loss_counts"], np.float64)
        arrays["fused"] = np.bool_(trainer._train_loop_fused)
        for key in sorted({k for record in captured["evals"] for k in record}):
            arrays[f"eval_{key}"] = np.array(
                [record.get(key, np.nan) for record in captured["evals"]], np.float64)
        np.savez(out_path, **arrays)
    sys.exit(code)


if __name__ == "__main__":
    _main()
