"""The `lite-train` command line the tests run, built in one place."""

import logging
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


def run_lite_train(monkeypatch, *args) -> int:
    """`lite-train ARGS` in this process (cheaper than a subprocess where the test needs no
    process of its own); its exit code (0 when it returns)."""
    from lite_launcher import main as main_lib  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(sys, "argv", ["lite-train"] + [str(a) for a in args])
    try:
        main_lib.run()
    except SystemExit as exit_request:
        return exit_request.code or 0
    finally:
        logging.disable(logging.NOTSET)  # the driver silences logging for its exit
    return 0
