"""The `lite-train` command line the tests run, built in one place."""

import os
import sys
from typing import List


def lite_train_command(*args, installed: bool = False) -> List[str]:
    """`python -m lite_launcher.main ARGS` with this Python (each argument as text); with
    `installed`, the `lite-train` console script next to this Python where it exists (the
    entry point a user runs)."""
    script = os.path.join(os.path.dirname(sys.executable), "lite-train")
    command = ([script] if installed and os.path.exists(script)
               else [sys.executable, "-m", "lite_launcher.main"])
    return command + [str(a) for a in args]
