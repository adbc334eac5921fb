"""TFM's `official.core.train_lib` for a ported driver: import it before parsing gin.

Importing it registers every gin configurable lite has, TFM's names: `Trainer`,
`create_trainer`, `get_train_actions`, `get_eval_actions`, `build_optimizer` (and lite's
`run_experiment`). A driver ported from TFM parses gin first in `main()`, as TFM's, so its
bindings (`create_trainer.trainer_cls = @CustomTrainer`) need them registered by its imports.

It imports TensorFlow. `import lite_launcher` alone does not (its names load on first use), so
that `lite-train --help` answers without loading TensorFlow; for the same reason it registers
no configurable.
"""

from lite_launcher import actions  # noqa: F401  (get_train_actions, get_eval_actions)
from lite_launcher import trainer  # noqa: F401  (Trainer)
from lite_launcher.experiment import ExperimentRunner, create_trainer, run_experiment  # noqa: F401
from lite_launcher.optimization import optimizer_factory  # noqa: F401  (build_optimizer)

# TFM's name of the runner `run_experiment` builds.
OrbitExperimentRunner = ExperimentRunner
