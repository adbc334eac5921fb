"""Built-in experiments; `lite_launcher.common.registry_imports` registers them all.

Importing this package registers the digits and workload experiments only; the vision families
register when their modules are imported (`registry_imports` imports them; the driver only the
family its `--experiment` needs, `builtin_experiments.modules_for`: issue 31).

The names of every built-in experiment and the module registering each:
`lite_launcher.common.builtin_experiments.BUILTIN_EXPERIMENTS` (one table).
"""

from lite_launcher.experiments import digits  # noqa: F401  (registers digits_mlp, digits_cnn)
from lite_launcher.experiments import workloads  # noqa: F401  (registers mlp_tiny, cnn_small, mock)
