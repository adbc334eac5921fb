"""Writes vision_layout_reference.json: the weights (path, shape, in creation order) and the
checkpoint keys of one small model per vision family (tests/vision/vision_layout.py), as the
code before the shared vision-layers refactor (commit b786280) built them. The refactor must
leave users' checkpoints and weight files readable, so tests/vision/test_vision_layout.py
compares today's models with these lists.

Run from the repository root with lite's own venv, at the commit to record:

    PYTHONPATH=. .venv/bin/python tests/vision/data/make_vision_layout_reference.py
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import keras  # noqa: E402

from vision_layout import MODELS, build, layout  # noqa: E402


def main():
    reference = {}
    for name in MODELS:
        with tempfile.TemporaryDirectory() as directory:
            reference[name] = layout(build(name), directory)
        keras.backend.clear_session()
        print(name, len(reference[name]["weights"]), "weights",
              len(reference[name]["checkpoint"]), "checkpoint keys")
    with open(os.path.join(HERE, "vision_layout_reference.json"), "w") as f:
        json.dump(reference, f, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
