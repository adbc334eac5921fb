"""Time to first step (issue 31): what lite no longer does before its first training step.

Each test pins one win by its mechanism, not by a clock: the modules a training run imports,
how often decoupled weight decay evaluates the learning-rate schedule while the step is
traced, which of lite's functions AutoGraph converts, and one trace of the train loop.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs lite-train once per argv (sys.argv[1], JSON) in one fresh interpreter and prints, after
# each run, its exit code and the lite_launcher modules loaded by then.
_MODULES_AFTER_RUNS = """
import json, sys
from lite_launcher import main
for args in json.loads(sys.argv[1]):
    sys.argv = ["lite-train"] + args
    try:
        main.run()
        code = 0
    except SystemExit as exit:
        code = exit.code
    print("MODULES " + json.dumps({"code": code, "modules": sorted(
        m for m in sys.modules if m.startswith("lite_launcher"))}), flush=True)
"""


@pytest.fixture(scope="module")
def modules_after(tmp_path_factory):
    """The modules a digits_mlp training run loaded, then those loaded once a resnet_imagenet
    --dry_run ran after it (one TensorFlow start-up for both), and the run's model_dir."""
    root = tmp_path_factory.mktemp("first_step")
    model_dir = root / "m"
    runs = [["--experiment", "digits_mlp", "--mode", "train", "--model_dir", str(model_dir),
             "--params_override", "trainer.train_steps=2,trainer.steps_per_loop=1,"
             "trainer.checkpoint_interval=2,trainer.summary_interval=2"],
            ["--experiment", "resnet_imagenet", "--mode", "train",
             "--model_dir", str(root / "dry"), "--dry_run"]]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _MODULES_AFTER_RUNS, json.dumps(runs)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=root)
    reports = [json.loads(l[len("MODULES "):]) for l in out.stdout.splitlines()
               if l.startswith("MODULES ")]
    assert len(reports) == 2, out.stderr[-2000:]
    return dict(zip(("digits_train", "resnet_dry_run"), reports), model_dir=model_dir)


def test_a_training_run_imports_only_its_own_experiment_family(modules_after):
    """`lite-train --mode train` of digits_mlp trains without importing any vision module
    (segmentation, classification, serving) or the SavedModel export."""
    result = modules_after["digits_train"]
    assert result["code"] in (0, None)
    assert (modules_after["model_dir"] / "checkpoint").exists()  # it did train
    assert "lite_launcher.core.base_trainer" in result["modules"]
    unwanted = [m for m in result["modules"]
                if m.startswith("lite_launcher.vision") or m == "lite_launcher.commands.export"]
    assert unwanted == []


def test_a_classification_experiment_does_not_load_segmentation(modules_after):
    # Everything loaded in that process by then: the digits run before it loaded no vision.
    result = modules_after["resnet_dry_run"]
    assert result["code"] in (0, None)
    assert "lite_launcher.vision.tasks.image_classification" in result["modules"]
    assert [m for m in result["modules"] if "segmentation" in m] == []


def _counting_schedule():
    from lite_launcher.optimization import lr_schedule

    calls = []

    class Counting(lr_schedule.LinearWarmup):
        def __call__(self, step):
            calls.append(1)
            return super().__call__(step)

    cosine = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=100)
    return Counting(cosine, warmup_steps=3, warmup_learning_rate=0.0), calls


@pytest.mark.parametrize("kind", ["adamw", "lion"])
def test_weight_decay_reads_the_schedule_once_per_step_with_the_same_numbers(kind):
    from lite_launcher.optimization import optimizers

    schedule, calls = _counting_schedule()
    # Keras's decay (the schedule read per variable) with lite's update: only the decay differs.
    class KerasDecayAdamW(optimizers.FusedAdamUpdate, keras.optimizers.AdamW):
        pass

    lite_cls, keras_cls = ((optimizers.AdamW, KerasDecayAdamW) if kind == "adamw"
                           else (optimizers.Lion, keras.optimizers.Lion))
    results = []
    for cls in (lite_cls, keras_cls):
        variables = [tf.Variable(np.full((3,), i + 1.0, np.float32)) for i in range(20)]
        optimizer = cls(learning_rate=schedule, weight_decay=0.1)
        optimizer.build(variables)

        @tf.function
        def step(optimizer=optimizer, variables=variables):
            optimizer.apply_gradients([(tf.ones_like(v) * 0.5, v) for v in variables])

        calls.clear()
        step.get_concrete_function()
        results.append((len(calls), step))
        for _ in range(5):
            step()
        results[-1] = (len(calls), [v.numpy() for v in variables])
    (lite_calls, lite_values), (keras_calls, keras_values) = results
    # Keras reads it once for the update and once per decayed variable; lite once for each.
    assert keras_calls == 21 and lite_calls == 2
    for a, b in zip(lite_values, keras_values):
        np.testing.assert_array_equal(a, b)


def test_adamw_from_the_factory_is_lites():
    from lite_launcher.optimization import optimizer_factory, optimizers
    from lite_launcher.optimization.configs import OptimizationConfig

    config = OptimizationConfig({"optimizer": {"type": "adamw"},
                                 "learning_rate": {"type": "constant"}})
    optimizer = optimizer_factory.OptimizerFactory(config).build_optimizer(0.1)
    assert isinstance(optimizer, optimizers.AdamW)
    assert isinstance(optimizer, keras.optimizers.AdamW)


# lite's functions the classification train step and input pipeline call that AutoGraph must
# leave alone (graph-safe as written); the callers of overridable hooks stay converted.
UNCONVERTED = {
    "_split_inputs", "is_loss_scale_optimizer", "learning_rate_value", "unwrap_loss_scale",
    "Task.process_metrics", "ImageClassificationTask.process_metrics",
    "ImageClassificationTask.build_losses", "ImageClassificationTask._loss_labels",
    "ImageClassificationTask._with_loss_labels", "Trainer._loop_end_logs",
    "Trainer._fused_loop_end",
    "Parser._label", "Parser._resize", "Parser._needs_decoding", "normalize_image",
    "decode_and_random_crop_jpeg", "_sample_crop", "_crop_window", "_center_box",
    "decode_and_center_crop_jpeg",
}


@pytest.fixture
def converted_names(monkeypatch):
    """The qualified names of the lite functions AutoGraph converts (its internal converter,
    the only place that sees every conversion)."""
    from tensorflow.python.autograph.impl import api

    names = []
    original = api._convert_actual

    def recording(entity, program_ctx):
        if getattr(entity, "__module__", "").startswith("lite_launcher"):
            names.append(entity.__qualname__)
        return original(entity, program_ctx)

    monkeypatch.setattr(api, "_convert_actual", recording)
    return names


def _jpeg_records(path, count=4):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(count):
            pixels = np.full((40, 40, 3), 20 * i, np.uint8)
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_jpeg(pixels).numpy()])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[i % 3]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())


def _classification_trainer(tmp_path, task_cls=None):
    import lite_launcher as ll
    from lite_launcher.core import base_trainer as trainer_lib

    _jpeg_records(tmp_path / "train-00000-of-00001")
    params = ll.get_exp_config("resnet_imagenet")
    params.override({
        "task": {"model": {"num_classes": 3, "input_size": [32, 32, 3],
                           "backbone": {"type": "resnet", "resnet": {"model_id": 10}}},
                 "losses": {"one_hot": True},
                 "train_data": {"input_path": str(tmp_path / "train-*"),
                                "global_batch_size": 2, "shuffle_buffer_size": 4}},
        "trainer": {"steps_per_loop": 1, "train_steps": 2},
        "runtime": {"enable_xla": False}})
    task = (task_cls or type(ll.get_task(params.task)))(params.task)
    return trainer_lib.Trainer(params, task, model=task.build_model(), evaluate=False,
                               optimizer=task.create_optimizer(
                                   params.trainer.optimizer_config, params.runtime))


def test_autograph_converts_none_of_lites_own_step_and_parser(tmp_path, converted_names):
    trainer = _classification_trainer(tmp_path)
    steps = tf.constant(1, tf.int32)
    trainer.train(steps)
    trainer.train(steps)
    converted = set(converted_names)
    # The counter sees conversions: the loop over tf.range is converted ...
    assert "make_train_loop.<locals>.loop_then_end" in converted
    # ... and nothing of the step or the parser, all lite's own code (autograph_policy).
    assert converted & UNCONVERTED == set()
    assert {"Trainer.train_step", "Task.train_step", "Task.compute_gradients",
            "Task.apply_update", "Parser._train_image", "Parser.parse_train_data"} & converted \
        == set()
    # One trace of the train loop for two loops of the same length.
    assert trainer._train_loop.loop_fn.experimental_get_tracing_count() == 1


def test_a_users_task_subclass_is_converted_as_under_tfm(tmp_path, converted_names):
    """A user's override with Python control flow on a tensor traces (AutoGraph converts it),
    and so does the lite code that calls it."""
    from lite_launcher.vision import image_classification

    class TaskWithBranchingLoss(image_classification.ImageClassificationTask):
        def build_losses(self, labels, model_outputs, aux_losses=None):
            loss = super().build_losses(labels, model_outputs, aux_losses)
            if loss > 1e6:  # a tensor condition: needs AutoGraph inside a tf.function
                loss = loss * 0.0
            return loss

    trainer = _classification_trainer(tmp_path, TaskWithBranchingLoss)
    logs = trainer.train(tf.constant(1, tf.int32))
    assert np.isfinite(logs["training_loss"]) and logs["training_loss"] > 0
    converted = set(converted_names)
    assert {"Trainer.train_step", "Task.compute_gradients"} <= converted
    assert converted & UNCONVERTED == set()


def test_autograph_policy_tells_lites_code_from_a_users():
    from lite_launcher.common import autograph_policy
    from lite_launcher.orbit import loops
    from lite_launcher.vision import classification_input

    def users_function():
        return 1

    class UsersParser(classification_input.Parser):
        pass

    parser = classification_input.Parser.__new__(classification_input.Parser)
    users_parser = UsersParser.__new__(UsersParser)
    assert autograph_policy.is_framework_code(loops.split_steps)
    assert autograph_policy.is_framework_code(parser.parse_train_data)
    assert not autograph_policy.is_framework_code(users_function)
    assert not autograph_policy.is_framework_code(users_parser.parse_train_data)
    # A lite method reaching a user's object stays converted.
    assert autograph_policy.for_tracing(parser.parse_train_data, users_parser) \
        == parser.parse_train_data
    assert autograph_policy.for_tracing(users_function) is users_function


def _op_counts(concrete):
    import collections

    graph_def = concrete.graph.as_graph_def()
    ops = collections.Counter(node.op for node in graph_def.node)
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def test_the_unconverted_step_traces_the_same_graph(tmp_path, monkeypatch):
    from lite_launcher.common import autograph_policy

    graphs = []
    for policy in (autograph_policy.for_tracing, lambda fn, *reached: fn):
        monkeypatch.setattr(autograph_policy, "for_tracing", policy)
        data_dir = tmp_path / str(len(graphs))
        data_dir.mkdir()
        trainer = _classification_trainer(data_dir)
        steps = tf.constant(1, tf.int32)
        trainer.train(steps)
        loop_fn = trainer._train_loop.loop_fn
        graphs.append(_op_counts(loop_fn.get_concrete_function(
            trainer._train_loop.iterator, steps)))
    unconverted, converted = graphs
    assert sum(unconverted.values()) > 1000  # the whole step: forward, backward, update
    assert unconverted == converted


# A stand-in for TensorFlow's package (first on the path): at import it tries what Keras's
# import tries and records which of them it could import.
_FAKE_TF = """
import importlib
SAW = {}
for name in ("sklearn.base", "matplotlib.pyplot", "pandas", "json"):
    try:
        importlib.import_module(name)
        SAW[name] = True
    except ImportError:
        SAW[name] = False
"""
_AFTER_TF = """
import json, sys
{before}
import tensorflow
import sklearn.base, matplotlib.pyplot, pandas  # a user's own imports, after TensorFlow's
print(json.dumps({{"saw": tensorflow.SAW, "status": status,
                   "loader": type(tensorflow.__loader__).__name__,
                   "finders": [type(f).__name__ for f in sys.meta_path]}}))
"""


def _without_opt_out():
    return {k: v for k, v in os.environ.items() if k != "LITE_KERAS_OPTIONAL_IMPORTS"}


@pytest.mark.parametrize("env, before, hidden", [
    ({}, "status = None", False),
    ({}, "from lite_launcher.common import lean_imports\n"
         "status = lean_imports.hide_while_tensorflow_loads()", True),
    ({"LITE_KERAS_OPTIONAL_IMPORTS": "1"}, "from lite_launcher.common import lean_imports\n"
     "status = lean_imports.hide_while_tensorflow_loads()", False),
    ({}, "import pandas, sklearn\nfrom lite_launcher.common import lean_imports\n"
         "status = lean_imports.hide_while_tensorflow_loads()", "partly"),
])
def test_keras_optional_packages_are_hidden_from_tensorflows_import_only(tmp_path, env, before,
                                                                         hidden):
    for package in ("tensorflow", "sklearn", "matplotlib", "pandas"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(_FAKE_TF if package == "tensorflow"
                                                        else "")
    (tmp_path / "sklearn" / "base.py").write_text("")
    (tmp_path / "matplotlib" / "pyplot.py").write_text("")
    out = subprocess.run(
        [sys.executable, "-c", _AFTER_TF.format(before=before)], capture_output=True,
        text=True, check=True, cwd=tmp_path,
        env=dict(_without_opt_out(), PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", **env)).stdout
    result = json.loads(out.splitlines()[-1])
    expected = {"sklearn.base": not hidden, "matplotlib.pyplot": not hidden,
                "pandas": not hidden, "json": True}
    if hidden == "partly":  # imported before TensorFlow: never hidden
        expected = {"sklearn.base": True, "matplotlib.pyplot": False, "pandas": True,
                    "json": True}
    assert result["saw"] == expected
    assert result["status"] == {"LITE_KERAS_OPTIONAL_IMPORTS": "user"}.get(
        next(iter(env), None), None if before == "status = None" else "set")
    # Once TensorFlow has loaded, the finder is gone and TensorFlow keeps its own loader.
    assert result["loader"] == "SourceFileLoader" and "_HidingFinder" not in result["finders"]


def test_the_driver_hides_them_before_tensorflow_loads():
    # `lite-train --help` exits before TensorFlow loads: by then the finder is in place.
    script = ("import sys\nfrom lite_launcher.commands import train\n"
              "sys.argv = ['lite-train', '--help']\ntry:\n    train.run()\n"
              "except SystemExit:\n    pass\n"
              "import importlib.machinery as m\n"
              "names = [type(f).__name__ if f is not m.PathFinder else 'PathFinder' "
              "for f in sys.meta_path]\n"
              "print('FINDERS', 'tensorflow' in sys.modules, "
              "names[names.index('PathFinder') - 1])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env=dict(_without_opt_out(), PYTHONPATH=ROOT)).stdout
    # Just before the path finder that loads TensorFlow (behind earlier import hooks).
    assert out.splitlines()[-1] == "FINDERS False _HidingFinder"
