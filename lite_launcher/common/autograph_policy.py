"""Which traced functions AutoGraph converts (issue 31: time to first step).

AutoGraph rewrites a function's source before it is traced, so that Python control flow on
tensors (`if loss > 0:`, `while`) becomes graph control flow. TFM's `tf.function`s (Orbit's
loops, `tf.data` maps) convert everything they reach. lite_launcher's own step and parser code
needs no conversion (it has no Python control flow on tensors), and parsing and rewriting its
source is a large part of tracing the first step. So a step or map function whose code is all
lite_launcher's is traced unconverted (the graph is the same), and one that reaches a user's
code — a `Task`, `Trainer` or parser subclass written outside lite_launcher — is converted, as
under TFM.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import tensorflow as tf

_FRAMEWORK_PACKAGE = "lite_launcher"
# Base classes that are not user code: TensorFlow's and Keras's (AutoGraph never converts
# them) and Python's own.
_LIBRARY_PACKAGES = ("tensorflow", "keras", "builtins", "abc", "typing")


def _in_package(module: Any, packages) -> bool:
    return isinstance(module, str) and any(
        module == package or module.startswith(package + ".") for package in packages)


def _is_framework_module(module: Any) -> bool:
    return _in_package(module, (_FRAMEWORK_PACKAGE,))


def is_framework_object(obj: Any) -> bool:
    """Whether `obj`'s class is lite_launcher's and so are all its bases (TensorFlow's,
    Keras's and Python's own bases aside)."""
    classes = type(obj).__mro__
    return _is_framework_module(classes[0].__module__) and all(
        _in_package(cls.__module__, (_FRAMEWORK_PACKAGE,) + _LIBRARY_PACKAGES)
        for cls in classes)


def is_framework_code(fn: Callable) -> bool:
    """Whether `fn` runs only lite_launcher's code: a function defined in lite_launcher, or a
    method of an object whose classes are all lite_launcher's."""
    owner = getattr(fn, "__self__", None)
    if owner is not None and inspect.ismethod(fn):
        return is_framework_object(owner) and _is_framework_module(
            getattr(fn.__func__, "__module__", None))
    return inspect.isfunction(fn) and _is_framework_module(fn.__module__)


def for_tracing(fn: Callable, *reached: Any) -> Callable:
    """`fn`, marked not to be converted by AutoGraph when it and every object in `reached`
    (whose methods it calls: the task of a trainer's step, ...) are lite_launcher's own;
    otherwise `fn` unchanged, so that AutoGraph converts it and the user code it calls."""
    if is_framework_code(fn) and all(is_framework_object(obj) for obj in reached):
        return tf.autograph.experimental.do_not_convert(fn)
    return fn
