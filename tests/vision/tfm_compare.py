"""Compares a config's `as_dict()` with TFM's (the JSON a `make_tfm_*.py` generator wrote);
loads a generator module so a test rebuilds its NumPy inputs."""

import contextlib
import importlib.util
import json
import math
import os

import keras

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def load_generator(name):
    """The module `data/<name>.py` (a `make_tfm_*` generator), imported without running its
    `main()`: its `inputs()` and case tables are NumPy only."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(DATA_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_plain_dict(config, *sections):
    """`{section: config.<section>.as_dict()}` as JSON would hold it (tuples as lists)."""
    return json.loads(json.dumps({name: getattr(config, name).as_dict() for name in sections},
                                 default=list))


def differences(tfm, lite, path=""):
    """(missing, different): the dotted paths of TFM's keys that lite lacks, and
    (path, tfm value, lite value) for every value that differs (floats to 1e-12 relative;
    an int where TFM has a float is equal)."""
    missing, different = [], []
    _walk(tfm, lite, path, missing, different)
    return missing, different


def _walk(tfm, lite, path, missing, different):
    if isinstance(tfm, dict):
        if not isinstance(lite, dict):
            different.append((path, tfm, lite))
            return
        for key, value in tfm.items():
            if key not in lite:
                missing.append(f"{path}.{key}")
            else:
                _walk(value, lite[key], f"{path}.{key}", missing, different)
    elif isinstance(tfm, list):
        if not isinstance(lite, (list, tuple)) or len(tfm) != len(lite):
            different.append((path, tfm, lite))
            return
        for i, (a, b) in enumerate(zip(tfm, lite)):
            _walk(a, b, f"{path}[{i}]", missing, different)
    elif isinstance(tfm, float) and isinstance(lite, (int, float)) and not isinstance(lite, bool):
        if not math.isclose(tfm, lite, rel_tol=1e-12, abs_tol=0.0):
            different.append((path, tfm, lite))
    elif tfm != lite or type(tfm) is not type(lite) and not (
            isinstance(tfm, int) and isinstance(lite, float)):
        different.append((path, tfm, lite))


def count_weights(weights):
    """The number of values in `weights` (lite's or TFM's variables)."""
    return int(sum(int(math.prod(w.shape)) for w in weights))


def shapes(tree):
    """A nested dict of tensors -> the same dict of their shapes as lists (None: unknown)."""
    if isinstance(tree, dict):
        return {str(k): shapes(v) for k, v in tree.items()}
    return [None if d is None else int(d) for d in tree.shape]


@contextlib.contextmanager
def shapes_only():
    """Models built inside get variables with shapes but no values: a count of weights or
    L2 terms needs only shapes, and skipping the initialisers builds a big model several
    times faster. Keras's list of the uninitialised variables is dropped on the way out."""
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield
    finally:
        keras.backend.clear_session()


def regularised_weights(model):
    """How many weights carry an L2 regulariser: `len(model.losses)` without computing them
    (test_vision_zoo_models pins the two equal on initialised models)."""
    return sum(1 for w in model.weights if getattr(w, "regularizer", None) is not None)
