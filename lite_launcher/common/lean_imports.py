"""Keras's optional integrations kept out of a driver's TensorFlow import: a choice `lite-train`
makes before TensorFlow loads, as `onednn` does.

`import tensorflow` imports Keras 3 whole (TensorFlow loads `keras.src.optimizers` eagerly), and
Keras's import takes in, whenever they are installed, scikit-learn (for `keras.wrappers`'
SKLearnClassifier / Regressor), matplotlib.pyplot (`keras.visualization`'s plot galleries) and
pandas (`model.fit`'s DataFrame slicing). None of them is a dependency of lite_launcher, and a
training driver uses none of these integrations; in an environment that happens to have them
(TFM's venv has all three, through tf-models-official's dependencies) they cost a large part of
the import (scikit-learn alone pulls in most of SciPy) and its resident memory, before the first
step. Keras imports submodules of them at import time (`from sklearn.base import ...`,
`matplotlib.pyplot`), which an `importlib.util.LazyLoader` module cannot defer.

So `hide_while_tensorflow_loads` hides them from the import of TensorFlow and Keras only: while
the first of the two loads, Keras finds them as it does in lite's own install, where they are
absent; once it has loaded they are importable again, so a user's module that imports any of
them works as before (a package already imported is never hidden). What changes is only inside
Keras, in that process: its scikit-learn wrappers and plot galleries raise their "requires
scikit-learn / matplotlib" ImportError, and `model.fit` does not take pandas objects.
`LITE_KERAS_OPTIONAL_IMPORTS=1` keeps Keras's own behaviour.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import MutableMapping, Optional, Sequence

ENV_VAR = "LITE_KERAS_OPTIONAL_IMPORTS"
HIDDEN = ("sklearn", "matplotlib", "pandas")
# The imports the window covers: whichever of them starts first (each imports the other).
_WINDOW = ("tensorflow", "keras")


class _HidingFinder(importlib.abc.MetaPathFinder):
    """Wraps the first import of TensorFlow or Keras: while it runs, `HIDDEN` packages are None
    in sys.modules (Python's own "not importable"); after it, they are restored and the finder
    removes itself."""

    def __init__(self, hidden: Sequence[str]):
        self._hidden = tuple(hidden)

    def find_spec(self, name, path=None, target=None):
        if name not in _WINDOW:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HidingLoader(spec.loader, self)
        return spec

    def hide(self):
        hidden = [n for n in self._hidden if n not in sys.modules]
        for name in hidden:
            sys.modules[name] = None
        return hidden

    def restore(self, hidden):
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _HidingLoader(importlib.abc.Loader):
    """The real loader of TensorFlow's (or Keras's) package, run with the packages hidden."""

    def __init__(self, loader, finder: _HidingFinder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The outer import of the two closes the window; the inner one finds the finder gone.
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        hidden = self._finder.hide()
        try:
            self._loader.exec_module(module)
        finally:
            self._finder.restore(hidden)
            # The module keeps its real loader (pkgutil, importlib.resources, reload).
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self._loader, name)


def hide_while_tensorflow_loads(environ: Optional[MutableMapping[str, str]] = None) -> str:
    """Hides scikit-learn, matplotlib and pandas from the coming import of TensorFlow / Keras.

    Returns why: 'set' (the next import of either runs with them hidden), 'user'
    (`LITE_KERAS_OPTIONAL_IMPORTS=1`: Keras imports them as usual), 'loaded' (TensorFlow or
    Keras is already imported: too late to choose).
    """
    environ = os.environ if environ is None else environ
    if environ.get(ENV_VAR) == "1":
        return "user"
    if any(name in sys.modules for name in _WINDOW):
        return "loaded"
    if not any(isinstance(f, _HidingFinder) for f in sys.meta_path):
        # Just before the path finder that would load TensorFlow, behind any finder the
        # process installed earlier (import hooks, watches), which still see the import first.
        path_finders = [i for i, f in enumerate(sys.meta_path)
                        if f is importlib.machinery.PathFinder]
        sys.meta_path.insert(path_finders[0] if path_finders else len(sys.meta_path),
                             _HidingFinder(HIDDEN))
    return "set"
