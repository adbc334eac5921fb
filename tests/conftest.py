"""Test set-up shared by the whole suite.

Two logical CPU devices are configured before TensorFlow initialises its devices, so that
MirroredStrategy tests can run in-process with 2 replicas; everything else uses CPU:0.
"""

import gc
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
from absl import logging as absl_logging  # noqa: E402


def _runs_no_test(config) -> bool:
    """True in pytest-xdist's controller (`-n N`), which only hands out files and gathers
    reports: importing TensorFlow there (~6 s) would delay the workers' start by as much."""
    workers = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin(
        "xdist") else None
    return bool(workers) and not os.environ.get("PYTEST_XDIST_WORKER")


def keep_the_file_order(config):
    """Makes pytest-xdist's `--dist loadfile` hand out the files in collection order (longest
    first, below), as its `--no-loadscope-reorder` does (pytest-xdist 3.8+, which [test] asks
    for). By default its scheduler reorders them by their number of tests, most first: the
    heavy files of one or two tests (the two-stage variants, the TFLite AP run, Mask R-CNN
    training) ran last, and one worker finished alone (28 s of a 558 s run, 2026-12-07). Runs
    in the controller, where the scheduler is."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_configure(config):
    keep_the_file_order(config)
    if _runs_no_test(config):
        return
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * 2)
    except RuntimeError:  # devices already initialised by an earlier import
        pass
    # TensorFlow's and Keras's objects (~270,000) are never garbage: moved out of the
    # collector's reach, each full collection scans only what the tests made.
    gc.freeze()
    _FullCollections.frozen_after_last = gc.get_freeze_count()


# The files that take longest (worker-seconds in the 2-worker suite, tests/file_seconds.json),
# collected first, longest first: with `--dist loadfile` the workers take files in collection
# order, so the alphabetical order ran the heaviest (tests/vision/...) last and left one worker
# alone for the final minutes; longest first, the last files handed out are the short ones.
with open(os.path.join(ROOT, "tests", "file_seconds.json")) as _f:
    FILE_SECONDS = json.load(_f)["seconds"]
LONGEST_FILES_FIRST = tuple(sorted(FILE_SECONDS, key=FILE_SECONDS.get, reverse=True))


ALL_ITEMS = pytest.StashKey()


@pytest.hookimpl(tryfirst=True)  # before `-m "not release"` deselects the release tests
def pytest_collection_modifyitems(session, config, items):
    import release_siblings  # tests/ is on sys.path: pytest puts a rootless conftest's folder there

    whole = release_siblings.holds_whole_suite(items, config.args)
    found = release_siblings.problems(items, whole_suite=whole)
    if found:
        message = "release tests without a sibling in the suite:\n" + "\n".join(found)
        print(message, file=sys.stderr, flush=True)  # pytest_unconfigure's _exit skips pytest's
        raise pytest.UsageError(message)
    config.stash[ALL_ITEMS] = (list(items), whole)
    rank = {path: i for i, path in enumerate(LONGEST_FILES_FIRST)}

    def key(indexed):
        index, item = indexed
        path = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
        return (rank.get(path, len(rank)), index)  # stable within a file and for the rest

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


# Interpreter shutdown after a TF-heavy session can stall for minutes: garbage collection during
# finalisation destroys the remaining tf.data iterators, whose thread pools wait on threads
# that are already stopping. The results are reported by then, so the session leaves at once.
_exit_status = None


def pytest_sessionfinish(session, exitstatus):
    global _exit_status
    _exit_status = int(exitstatus)


def pytest_unconfigure(config):
    if _exit_status is None or os.environ.get("LITE_TESTS_NORMAL_EXIT"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)


_SESSION_TF_CONFIG = os.environ.get("TF_CONFIG")


@pytest.fixture(autouse=True)
def _restore_tf_config():
    """TF_CONFIG as the session started, after every test: `strategy.configure_cluster` writes
    os.environ itself, and a leaked TF_CONFIG makes a later `lite-train` subprocess defer its
    model_dir lock (it might be a non-chief worker), whichever test runs next in the process."""
    yield
    if _SESSION_TF_CONFIG is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = _SESSION_TF_CONFIG


def _keep_the_global_dtype_policy():
    import keras  # pylint: disable=import-outside-toplevel
    policy = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(policy)


# Keras's global dtype policy as a module and as a test found it: building a task the way a
# driver does sets it (`runtime.mixed_precision_dtype`; TFM's detection experiments default to
# bfloat16), and a policy left behind made a later module's models bfloat16 in the same worker
# (a float TFLite export failed to convert, served detections differed from TFM's).
_restore_the_modules_dtype_policy = pytest.fixture(scope="module", autouse=True)(
    _keep_the_global_dtype_policy)
_restore_the_tests_dtype_policy = pytest.fixture(autouse=True)(_keep_the_global_dtype_policy)


@pytest.fixture(autouse=True)
def _reset_the_driver_flags():
    """The driver's flags that an in-process `lite-train` parsed go back to their defaults
    after each test: absl keeps parsed values in the process, so a `--config_file` parsed by
    one test was read again by a later test's `parse_configuration` in the same worker."""
    yield
    import cli  # tests/ is on sys.path (see pytest_collection_modifyitems)
    cli.reset_driver_flags()


# Logging as every in-process `lite-train` / `lite-export` leaves it, from the first test on:
# the first `app.run` in a process installs absl's handler on the root logger, which also sets
# the root level from --verbosity and the `absl` logger's level to NOTSET. Without this, a
# test that reads INFO records through caplog passes or fails by whether an earlier test in
# the same process ran the driver in-process.
absl_logging.use_absl_handler()


@pytest.fixture(autouse=True)
def _collect_the_tests_garbage():
    """Collects each test's reference cycles as it ends. A tf.data iterator left in a cycle is
    otherwise destroyed by whichever later collection finds it, and its destructor waits for
    the iterator's autotuning thread, whose wake-up period grows with the iterator's age (up
    to a minute): single collections of 10-416 s inside unrelated tests, 320-1,000 s of a
    two-worker run's worker-seconds (measured with a gc callback; the waiting stack, read with
    gdb, is RootDataset::Iterator's destructor joining its Model::OptimizeLoop thread).

    What survives the collection is frozen, so the next test's collection scans only what that
    test made, not every model a module fixture holds (a median 0.11 s a test, ~190 of a
    two-worker run's worker-seconds); `_collect_the_modules_garbage` unfreezes at each module's
    end, when its fixtures are gone, so nothing stays uncollected past its module."""
    yield
    gc.collect()
    gc.freeze()


_WIDE_SCOPES = ("module", "session", "package", "class")
# Objects frozen since the last full collection beyond which a module's end collects anyway:
# what a test leaves alive in caches and drops later (a few thousand objects a module).
_FROZEN_GROWTH_LIMIT = 100_000


class _FullCollections:
    """What decides whether a module's end needs a full collection (see below)."""
    frozen_after_last = 0  # gc.get_freeze_count() after the last full collection
    wide_fixture_set_up = False  # in the current module


@pytest.fixture(scope="module", autouse=True)
def _collect_the_modules_garbage():
    """A full collection after a test module that set up a module-, class-, package- or
    session-scoped fixture (gone by then, except a session's), or after the frozen set grew by
    _FROZEN_GROWTH_LIMIT objects. A full collection scans TensorFlow's and Keras's objects too
    (0.2-0.7 s): after every one of the suite's 114 modules they took ~70 of a two-worker
    run's worker-seconds (py-spy, 2026-12-07); now 33 modules need one (22 s), while a module
    without such fixtures leaves almost nothing that the per-test collections did not take."""
    _FullCollections.wide_fixture_set_up = False
    yield
    grown = gc.get_freeze_count() - _FullCollections.frozen_after_last
    if _FullCollections.wide_fixture_set_up or grown > _FROZEN_GROWTH_LIMIT:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _FullCollections.frozen_after_last = gc.get_freeze_count()


# The suite's own wide-scoped autouse fixtures hold nothing to collect.
_HOLD_NOTHING = ("_collect_the_modules_garbage", "_restore_the_modules_dtype_policy")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Collects what a module- or session-scoped fixture left in reference cycles as soon as it
    is set up. A fixture that trains in-process leaves tf.data iterators in cycles; collected
    only after the first test, they had lived as long as that fixture and test took, and
    each destructor waited out an autotuning period doubled that many times (10-20 s
    teardowns); collected now, they are young and go at once."""
    yield
    if fixturedef.scope in _WIDE_SCOPES and fixturedef.argname not in _HOLD_NOTHING:
        _FullCollections.wide_fixture_set_up = True
        gc.collect()
