"""Runs the `lite-train` driver and saves what it trained, for tests/test_distribution.py.

    python lite_train_capture.py OUT.npz [lite-train flags...]

Runs `lite_launcher.main.run()` (exactly what the `lite-train` command runs) with the flags,
then writes OUT.npz: the trained model's weights (`weight_0`, `weight_1`, ...), the trainer's
final `global_step`, and `loss_counts`: the training-loss count of each inner loop, read just
before the trainer resets it (exact counts show that no update was lost). Exits with the
driver's exit code; OUT.npz is written only when the driver succeeded.
"""

import sys
import types

import numpy as np

from lite_launcher import experiment
from lite_launcher import main
from lite_launcher.trainer import Trainer

captured = {"trainer": None, "loss_counts": []}

_runner_run = experiment.ExperimentRunner.run


def runner_run(self):
    trainer = captured["trainer"] = self.trainer
    # An instance attribute: the trainer then calls it after each loop, as it would call an
    # overridden train_loop_end (instead of fusing the base one into the loop's graph).
    trainer.train_loop_end = types.MethodType(train_loop_end, trainer)
    return _runner_run(self)


def train_loop_end(self):
    self.join()  # an async (parameter-server) loop must finish before its count is read
    captured["loss_counts"].append(float(self.train_loss.count.numpy()))
    return Trainer.train_loop_end(self)


def _main():
    out_path = sys.argv[1]
    sys.argv = ["lite-train"] + sys.argv[2:]
    experiment.ExperimentRunner.run = runner_run
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
        np.savez(out_path, **arrays)
    sys.exit(code)


if __name__ == "__main__":
    _main()
