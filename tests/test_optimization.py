"""Tests of lite_launcher.optimization: configs -> Keras 3 optimizers, schedules, EMA, loss scale.

Expected numbers are computed here with numpy from the closed forms (TFM's semantics).
"""

import dataclasses
import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher import optimization as opt_lib
import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- helpers
def make_config(params):
    return opt_lib.OptimizationConfig().override(params)


def build(params):
    """(optimizer, learning rate) built by OptimizerFactory from a params dict."""
    factory = opt_lib.OptimizerFactory(make_config(params))
    lr = factory.build_learning_rate()
    return factory.build_optimizer(lr), lr


def sgd(lr=0.1, **sgd_params):
    return {"optimizer": {"type": "sgd", "sgd": sgd_params},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": lr}}}


def schedule_values(lr, steps):
    return np.array([float(lr(tf.constant(s, tf.int64))) for s in steps])


def variables(seed=0):
    rng = np.random.RandomState(seed)
    return [keras.Variable(rng.randn(2, 3).astype("float32"), name="kernel"),
            keras.Variable(rng.randn(3).astype("float32"), name="bias")]


def constant_grads(vs, scale=1.0, seed=1):
    rng = np.random.RandomState(seed)
    return [tf.constant(scale * rng.randn(*v.shape).astype("float32")) for v in vs]


def run_steps(optimizer, vs, num_steps):
    """Applies gradients (step k: k * a fixed direction); returns the weights after each step."""
    history = []
    for k in range(1, num_steps + 1):
        optimizer.apply_gradients(zip(constant_grads(vs, scale=k), vs))
        history.append([v.numpy().copy() for v in vs])
    return history


def numpy_ema(history, average_decay, dynamic_decay, start_step):
    """TFM's EMA over the weights after each step; the first update copies the weights."""
    averages = None
    for k, weights in enumerate(history, start=1):
        if k == 1 or k < start_step:
            decay = 0.0
        elif dynamic_decay:
            n = k - start_step
            decay = min(average_decay, (1.0 + n) / (10.0 + n))
        else:
            decay = average_decay
        weights = [w.astype(np.float64) for w in weights]
        averages = weights if averages is None else [
            decay * a + (1 - decay) * w for a, w in zip(averages, weights)]
    return averages


# ------------------------------------------------------------------------- optimizers
OPTIMIZER_CASES = [
    ("sgd", {"momentum": 0.9, "nesterov": True}, keras.optimizers.SGD,
     {"momentum": 0.9, "nesterov": True}),
    ("sgd_experimental", {"momentum": 0.5}, keras.optimizers.SGD, {"momentum": 0.5}),
    ("adam", {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5, "amsgrad": True},
     keras.optimizers.Adam, {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5, "amsgrad": True}),
    ("adam_experimental", {"beta_1": 0.7}, keras.optimizers.Adam, {"beta_1": 0.7}),
    ("adamw", {"weight_decay_rate": 0.01, "beta_2": 0.98}, keras.optimizers.AdamW,
     {"weight_decay": 0.01, "beta_2": 0.98, "global_clipnorm": 1.0}),
    ("adamw_experimental", {"weight_decay": 0.02}, keras.optimizers.AdamW,
     {"weight_decay": 0.02, "global_clipnorm": 1.0}),
    ("lamb", {"weight_decay_rate": 0.01}, keras.optimizers.Lamb,
     {"weight_decay_rate": 0.01, "epsilon": 1e-6}),
    ("rmsprop", {"rho": 0.8, "momentum": 0.1, "centered": True}, keras.optimizers.RMSprop,
     {"rho": 0.8, "momentum": 0.1, "centered": True}),
    ("adagrad", {"initial_accumulator_value": 0.2}, keras.optimizers.Adagrad,
     {"initial_accumulator_value": 0.2}),
    ("lion", {"beta_1": 0.8, "weight_decay_rate": 0.1}, keras.optimizers.Lion,
     {"beta_1": 0.8, "weight_decay": 0.1}),
]


@pytest.mark.parametrize("kind,params,keras_cls,attrs", OPTIMIZER_CASES,
                         ids=[c[0] for c in OPTIMIZER_CASES])
def test_every_optimizer_builds_and_takes_a_step(kind, params, keras_cls, attrs):
    optimizer, _ = build({"optimizer": {"type": kind, kind: params},
                          "learning_rate": {"type": "constant",
                                            "constant": {"learning_rate": 0.01}}})
    assert isinstance(optimizer, keras_cls)
    for name, value in attrs.items():
        assert getattr(optimizer, name) == value, name
    vs = variables()
    before = [v.numpy().copy() for v in vs]
    optimizer.apply_gradients(zip(constant_grads(vs), vs))
    assert int(optimizer.iterations) == 1
    for b, v in zip(before, vs):
        delta = np.abs(v.numpy() - b)
        assert np.all(np.isfinite(v.numpy()))
        assert 0 < delta.max() < 0.1  # moved, by about one learning rate at most


def test_sgd_momentum_matches_numpy():
    optimizer, _ = build(sgd(lr=0.1, momentum=0.9))
    vs = variables()
    w = [v.numpy().astype(np.float64) for v in vs]
    velocity = [np.zeros_like(x) for x in w]
    run_steps(optimizer, vs, 3)
    for k in range(1, 4):
        grads = [g.numpy() for g in constant_grads(vs, scale=k)]
        velocity = [0.9 * m - 0.1 * g for m, g in zip(velocity, grads)]
        w = [x + m for x, m in zip(w, velocity)]
    for expected, v in zip(w, vs):
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-5)


def test_adamw_decays_by_tfm_include_exclude_regexes():
    # Zero gradients leave only the decoupled decay: var *= 1 - lr * rate where decayed.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="dense"),
                              keras.layers.LayerNormalization(name="layer_norm")])
    for v in model.trainable_variables:
        v.assign(np.full(v.shape, 2.0, np.float32))
    optimizer, _ = build({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": 0.5, "exclude_from_weight_decay": ["bias", "layer_norm"],
            "include_in_weight_decay": ["layer_norm/gamma"]}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}})
    zeros = [tf.zeros(v.shape) for v in model.trainable_variables]
    optimizer.apply_gradients(zip(zeros, model.trainable_variables))
    values = {v.path.split("/", 1)[1]: float(v.numpy().flat[0])
              for v in model.trainable_variables}
    assert values == pytest.approx({"dense/kernel": 1.9, "dense/bias": 2.0,
                                    "layer_norm/gamma": 1.9, "layer_norm/beta": 2.0}, rel=1e-6)


def test_lamb_matches_tfm_formula():
    lr, b1, b2, eps, wd = 0.05, 0.9, 0.999, 1e-6, 0.1
    optimizer, _ = build({
        "optimizer": {"type": "lamb", "lamb": {"weight_decay_rate": wd,
                                               "exclude_from_weight_decay": ["bias"]}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": lr}}})
    vs = variables()
    w = [v.numpy().astype(np.float64) for v in vs]
    m = [np.zeros_like(x) for x in w]
    s = [np.zeros_like(x) for x in w]
    run_steps(optimizer, vs, 3)
    for t in range(1, 4):
        grads = [g.numpy().astype(np.float64) for g in constant_grads(vs, scale=t)]
        for i, (g, excluded) in enumerate(zip(grads, [False, True])):
            m[i] = b1 * m[i] + (1 - b1) * g
            s[i] = b2 * s[i] + (1 - b2) * g * g
            update = (m[i] / (1 - b1 ** t)) / (np.sqrt(s[i] / (1 - b2 ** t)) + eps)
            ratio = 1.0
            if not excluded:  # bias: no decay and (by default) no layer adaptation
                update = update + wd * w[i]
                ratio = np.linalg.norm(w[i]) / np.linalg.norm(update)
            w[i] = w[i] - ratio * lr * update
    for expected, v in zip(w, vs):
        np.testing.assert_allclose(v.numpy(), expected, rtol=2e-5)


def test_sgd_legacy_decay_divides_learning_rate():
    optimizer, lr = build(sgd(lr=0.1, decay=0.5))
    assert isinstance(lr, opt_lib.LegacyDecay)
    np.testing.assert_allclose(schedule_values(lr, [0, 1, 4]), [0.1, 0.1 / 1.5, 0.1 / 3.0],
                               rtol=1e-6)
    np.testing.assert_allclose(float(opt_lib.learning_rate_value(optimizer)), 0.1, rtol=1e-6)


# ------------------------------------------------------------------------------ clipping
@pytest.mark.parametrize("clip", ["clipnorm", "clipvalue", "global_clipnorm"])
def test_clipping_reaches_the_keras_optimizer(clip):
    optimizer, _ = build(sgd(lr=1.0, **{clip: 0.5}))
    assert getattr(optimizer, clip) == 0.5
    others = {"clipnorm", "clipvalue", "global_clipnorm"} - {clip}
    assert all(getattr(optimizer, o) is None for o in others)


def test_clipvalue_clips_the_update():
    optimizer, _ = build(sgd(lr=1.0, clipvalue=0.25))
    v = keras.Variable(np.zeros(3, np.float32))
    optimizer.apply_gradients([(tf.constant([5.0, -0.1, -3.0]), v)])
    np.testing.assert_allclose(v.numpy(), [-0.25, 0.1, 0.25], rtol=1e-6)


def test_global_clipnorm_clips_the_update():
    optimizer, _ = build(sgd(lr=1.0, global_clipnorm=1.0))
    v = keras.Variable(np.zeros(2, np.float32))
    optimizer.apply_gradients([(tf.constant([3.0, 4.0]), v)])  # norm 5 -> 1
    np.testing.assert_allclose(v.numpy(), [-0.6, -0.8], rtol=1e-6)


def test_two_clipping_options_are_a_config_error():
    with pytest.raises(ConfigError, match=r"optimizer\.sgd\.clipnorm.*optimizer\.sgd\.clipvalue"):
        build(sgd(clipnorm=1.0, clipvalue=1.0))


def test_adamw_gradient_clip_norm_composes_with_global_clipnorm():
    constant = {"type": "constant"}
    optimizer, _ = build({"optimizer": {"type": "adamw", "adamw": {
        "gradient_clip_norm": 2.0, "global_clipnorm": 0.5}}, "learning_rate": constant})
    assert optimizer.global_clipnorm == 0.5
    optimizer, _ = build({"optimizer": {"type": "adamw", "adamw": {"gradient_clip_norm": 0.0,
                                                                   "clipnorm": 3.0}},
                          "learning_rate": constant})
    assert optimizer.clipnorm == 3.0 and optimizer.global_clipnorm is None
    with pytest.raises(ConfigError, match=r"optimizer\.adamw\.gradient_clip_norm"):
        build({"optimizer": {"type": "adamw", "adamw": {"clipvalue": 1.0}},
               "learning_rate": constant})


# ---------------------------------------------------------------------------- schedules
def test_constant_learning_rate_is_a_float():
    optimizer, lr = build(sgd(lr=0.25))
    assert lr == 0.25 and isinstance(lr, float)
    assert float(opt_lib.learning_rate_value(optimizer)) == pytest.approx(0.25)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_unset_learning_rate_type_is_a_value_error_as_tfm(kind):
    # Not a silent Keras default rate: TFM's factory raises a ValueError here.
    with pytest.raises(ValueError, match=r"learning_rate\.type is not set; set it to one of: "
                                         r"constant, stepwise, .*cosine"):
        build({"optimizer": {"type": kind}})


def test_stepwise_with_offset():
    _, lr = build({"optimizer": {"type": "sgd"}, "learning_rate": {
        "type": "stepwise",
        "stepwise": {"boundaries": [10, 20], "values": [1.0, 0.5, 0.1], "offset": 5}}})
    steps = [0, 14, 15, 16, 25, 26, 1000]
    # values[i] while boundaries[i-1] < step - offset <= boundaries[i]
    np.testing.assert_allclose(schedule_values(lr, steps), [1.0, 1.0, 1.0, 0.5, 0.5, 0.1, 0.1])


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_with_offset_and_staircase(staircase):
    _, lr = build({"optimizer": {"type": "sgd"}, "learning_rate": {
        "type": "exponential",
        "exponential": {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5,
                        "staircase": staircase, "offset": 3}}})
    steps = np.array([0, 3, 8, 13, 17, 33])
    p = np.maximum(steps - 3, 0) / 10
    expected = 0.1 * 0.5 ** (np.floor(p) if staircase else p)
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6)


def test_polynomial_decay_clamps_after_decay_steps():
    _, lr = build({"optimizer": {"type": "sgd"}, "learning_rate": {
        "type": "polynomial",
        "polynomial": {"initial_learning_rate": 1.0, "decay_steps": 10,
                       "end_learning_rate": 0.1, "power": 2.0, "offset": 2}}})
    steps = np.array([0, 2, 5, 12, 50])
    s = np.minimum(np.maximum(steps - 2, 0), 10)
    expected = (1.0 - 0.1) * (1 - s / 10) ** 2 + 0.1
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6)
    assert expected[-1] == pytest.approx(0.1)


def test_polynomial_decay_cycle():
    _, lr = build({"optimizer": {"type": "sgd"}, "learning_rate": {
        "type": "polynomial",
        "polynomial": {"initial_learning_rate": 1.0, "decay_steps": 10,
                       "end_learning_rate": 0.0, "power": 1.0, "cycle": True}}})
    steps = np.array([0, 5, 10, 11, 15, 25])
    periods = 10 * np.maximum(np.ceil(steps / 10), 1)
    expected = 1.0 - steps / periods
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6, atol=1e-7)
    assert expected[3] == pytest.approx(1 - 11 / 20)


def test_cosine_with_offset_and_alpha():
    _, lr = build({"optimizer": {"type": "sgd"}, "learning_rate": {
        "type": "cosine",
        "cosine": {"initial_learning_rate": 0.2, "decay_steps": 100, "alpha": 0.1,
                   "offset": 10}}})
    steps = np.array([0, 10, 35, 60, 110, 500])
    s = np.minimum(np.maximum(steps - 10, 0), 100)
    expected = 0.2 * ((1 - 0.1) * 0.5 * (1 + np.cos(np.pi * s / 100)) + 0.1)
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6)
    assert expected[-1] == pytest.approx(0.02)


def test_linear_warmup_edges():
    _, lr = build({"optimizer": {"type": "sgd"},
                   "learning_rate": {"type": "cosine", "cosine": {
                       "initial_learning_rate": 1.0, "decay_steps": 20}},
                   "warmup": {"type": "linear", "linear": {"warmup_steps": 5,
                                                           "warmup_learning_rate": 0.1}}})
    assert isinstance(lr, opt_lib.LinearWarmup)

    def cosine(step):
        return 0.5 * (1 + math.cos(math.pi * min(step, 20) / 20))

    end = cosine(5)  # warmup ends at the schedule's value at warmup_steps
    expected = [0.1, 0.1 + (end - 0.1) / 5, 0.1 + 4 * (end - 0.1) / 5, end, cosine(6),
                cosine(30)]
    np.testing.assert_allclose(schedule_values(lr, [0, 1, 4, 5, 6, 30]), expected, rtol=1e-6)


def test_linear_warmup_of_a_constant():
    _, lr = build({**sgd(lr=0.5),
                   "warmup": {"type": "linear", "linear": {"warmup_steps": 4}}})
    np.testing.assert_allclose(schedule_values(lr, [0, 1, 2, 4, 9]),
                               [0.0, 0.125, 0.25, 0.5, 0.5], rtol=1e-6)


def test_polynomial_warmup_edges():
    _, lr = build({"optimizer": {"type": "sgd"},
                   "learning_rate": {"type": "stepwise", "stepwise": {
                       "boundaries": [6], "values": [0.8, 0.2]}},
                   "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": 4,
                                                                   "power": 2.0}}})
    # below warmup_steps: lr(4) * (max(step, 1) / 4) ** 2; then the stepwise schedule
    expected = [0.8 / 16, 0.8 / 16, 0.8 * 4 / 16, 0.8 * 9 / 16, 0.8, 0.8, 0.2]
    np.testing.assert_allclose(schedule_values(lr, [0, 1, 2, 3, 4, 6, 7]), expected, rtol=1e-6)


def test_schedule_in_tf_function_and_after_serialisation():
    _, lr = build({"optimizer": {"type": "sgd"},
                   "learning_rate": {"type": "exponential", "exponential": {
                       "initial_learning_rate": 0.3, "decay_steps": 7, "decay_rate": 0.9,
                       "offset": 2}},
                   "warmup": {"type": "linear", "linear": {"warmup_steps": 3}}})
    steps = [0, 1, 3, 10, 40]
    eager = schedule_values(lr, steps)
    traced = tf.function(lambda s: lr(s))
    np.testing.assert_allclose([float(traced(tf.constant(s, tf.int64))) for s in steps], eager,
                               rtol=1e-6)
    restored = keras.optimizers.schedules.deserialize(
        json.loads(json.dumps(keras.optimizers.schedules.serialize(lr))))
    assert isinstance(restored, opt_lib.LinearWarmup)
    assert isinstance(restored.after_warmup_lr_sched, opt_lib.ExponentialDecayWithOffset)
    np.testing.assert_allclose(schedule_values(restored, steps), eager)


def test_optimizer_with_schedule_round_trips_through_keras_serialisation():
    optimizer, _ = build({"optimizer": {"type": "adam"},
                          "learning_rate": {"type": "stepwise", "stepwise": {
                              "boundaries": [2], "values": [0.1, 0.01]}},
                          "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": 1}}})
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, keras.optimizers.Adam)
    for step in [0, 1, 2, 3]:
        assert float(opt_lib.learning_rate_value(restored, step)) == pytest.approx(
            float(opt_lib.learning_rate_value(optimizer, step)))


def test_learning_rate_value_follows_iterations_in_and_out_of_tf_function():
    optimizer, _ = build({"optimizer": {"type": "sgd"},
                          "learning_rate": {"type": "stepwise", "stepwise": {
                              "boundaries": [1], "values": [0.1, 0.01]}}})
    wrapped = opt_lib.configure_loss_scale(optimizer, use_float16=True, loss_scale=None)
    traced = tf.function(lambda: opt_lib.learning_rate_value(wrapped))
    vs = variables()
    values = []
    for _ in range(3):
        values.append((float(opt_lib.learning_rate_value(optimizer)), float(traced())))
        wrapped.apply_gradients(zip(constant_grads(vs), vs))
    assert values == [pytest.approx((0.1, 0.1)), pytest.approx((0.1, 0.1)),
                      pytest.approx((0.01, 0.01))]
    lr = opt_lib.learning_rate_value(wrapped, step=0)
    assert lr.dtype == tf.float32 and float(lr) == pytest.approx(0.1)


# ------------------------------------------------------------------------- config errors
@pytest.mark.parametrize("key,bad,valid", [
    ("optimizer", "adamx", "adamw"), ("learning_rate", "cosin", "cosine"),
    ("warmup", "linearr", "polynomial")])
def test_unknown_type_names_the_key_and_the_choices(key, bad, valid):
    with pytest.raises(ConfigError, match=rf"{key}\.type.*{valid}"):
        opt_lib.OptimizationConfig().override({key: {"type": bad}})


def test_unset_optimizer_type_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"optimizer\.type is not set.*sgd.*adamw.*lion"):
        opt_lib.OptimizerFactory(opt_lib.OptimizationConfig())


def test_type_set_by_attribute_is_checked_by_the_factory():
    config = make_config(sgd())
    config.learning_rate.type = "linear"
    with pytest.raises(ConfigError, match=r"learning_rate\.type.*stepwise"):
        opt_lib.OptimizerFactory(config)


@pytest.mark.parametrize("params,message", [
    ({"learning_rate": {"type": "stepwise", "stepwise": {"boundaries": [5]}}},
     r"learning_rate\.stepwise\.values must be set"),
    ({"learning_rate": {"type": "stepwise", "stepwise": {"boundaries": [5],
                                                         "values": [1.0]}}},
     r"one more entry"),
    ({"learning_rate": {"type": "cosine", "cosine": {"initial_learning_rate": 0.1}}},
     r"learning_rate\.cosine\.decay_steps must be set"),
    ({"learning_rate": {"type": "exponential", "exponential": {
        "initial_learning_rate": 0.1, "decay_steps": 0, "decay_rate": 0.5}}},
     r"learning_rate\.exponential\.decay_steps must be a positive integer"),
    ({"learning_rate": {"type": "constant"}, "warmup": {"type": "linear"}},
     r"warmup\.linear\.warmup_steps must be set"),
])
def test_incomplete_branches_are_config_errors(params, message):
    config = make_config({"optimizer": {"type": "sgd"}, **params})
    with pytest.raises(ConfigError, match=message):
        config.validate()
    with pytest.raises(ConfigError, match=message):
        opt_lib.OptimizerFactory(config)


def test_keras_argument_errors_become_config_errors():
    with pytest.raises(ConfigError, match=r"optimizer\.sgd: .*momentum"):
        build(sgd(momentum=1.5))


# ----------------------------------------------------------------------------------- EMA
def ema_params(**ema):
    return {**sgd(lr=0.1, momentum=0.5), "ema": ema}


def test_no_ema_by_default():
    optimizer, _ = build(sgd())
    assert not opt_lib.has_ema(optimizer)
    with pytest.raises(ValueError, match="no moving averages"):
        opt_lib.ema_variables(optimizer)


def test_fixed_decay_ema_is_keras_own_and_matches_numpy():
    optimizer, _ = build(ema_params(average_decay=0.8, dynamic_decay=False))
    # TFM's class (issue 18), averaging as Keras's own use_ema with a fixed decay.
    assert type(optimizer) is opt_lib.ema_optimizer.SGDWithEMASchedule  # noqa: E721
    assert isinstance(optimizer, opt_lib.ExponentialMovingAverage)
    assert optimizer.use_ema and optimizer.ema_momentum == 0.8
    vs = variables()
    history = run_steps(optimizer, vs, 5)
    expected = numpy_ema(history, 0.8, dynamic_decay=False, start_step=0)
    for e, a in zip(expected, opt_lib.ema_variables(optimizer)):
        np.testing.assert_allclose(a.numpy(), e, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected[0], history[-1][0])  # the average lags the weights


@pytest.mark.parametrize("start_step", [0, 3])
def test_dynamic_decay_ema_matches_numpy(start_step):
    optimizer, _ = build(ema_params(average_decay=0.9, start_step=start_step))
    assert isinstance(optimizer, keras.optimizers.SGD)
    vs = variables()
    history = run_steps(optimizer, vs, 6)
    expected = numpy_ema(history, 0.9, dynamic_decay=True, start_step=start_step)
    for e, a in zip(expected, opt_lib.ema_variables(optimizer)):
        np.testing.assert_allclose(a.numpy(), e, rtol=1e-5, atol=1e-6)


def test_dynamic_decay_ema_optimizer_round_trips_through_keras_serialisation():
    optimizer, _ = build(ema_params(average_decay=0.95, start_step=7))
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is type(optimizer)  # pylint: disable=unidiomatic-typecheck
    assert (restored.ema_momentum, restored.ema_dynamic_decay, restored.ema_start_step) == (
        0.95, True, 7)
    assert restored.momentum == 0.5


def test_dynamic_decay_ema_in_tf_function_matches_eager():
    eager_opt, _ = build(ema_params(average_decay=0.95))
    traced_opt, _ = build(ema_params(average_decay=0.95))
    eager_vs, traced_vs = variables(), variables()
    traced_opt.build(traced_vs)
    run_steps(eager_opt, eager_vs, 4)

    @tf.function
    def step(k):
        grads = [g * tf.cast(k, tf.float32) for g in constant_grads(traced_vs)]
        traced_opt.apply_gradients(zip(grads, traced_vs))

    for k in range(1, 5):
        step(tf.constant(k))
    for e, t in zip(opt_lib.ema_variables(eager_opt), opt_lib.ema_variables(traced_opt)):
        np.testing.assert_allclose(t.numpy(), e.numpy(), rtol=1e-6)


def test_swap_twice_restores_bit_for_bit():
    optimizer, _ = build(ema_params(average_decay=0.7))
    vs = variables()
    run_steps(optimizer, vs, 3)
    weights = [v.numpy().copy() for v in vs]
    averages = [a.numpy().copy() for a in opt_lib.ema_variables(optimizer)]
    assert not np.array_equal(weights[0], averages[0])
    opt_lib.swap_ema_weights(optimizer, list(reversed(vs)))  # any order
    for v, a, w, avg in zip(vs, opt_lib.ema_variables(optimizer), weights, averages):
        assert v.numpy().tobytes() == avg.tobytes()
        assert a.numpy().tobytes() == w.tobytes()
    opt_lib.swap_ema_weights(optimizer, vs)
    for v, a, w, avg in zip(vs, opt_lib.ema_variables(optimizer), weights, averages):
        assert v.numpy().tobytes() == w.tobytes()
        assert a.numpy().tobytes() == avg.tobytes()


def test_swap_rejects_a_variable_the_optimizer_does_not_train():
    optimizer, _ = build(ema_params())
    vs = variables()
    run_steps(optimizer, vs, 1)
    with pytest.raises(ValueError, match="not one the optimizer trains"):
        opt_lib.swap_ema_weights(optimizer, [keras.Variable(np.zeros(3, np.float32))])


def test_ema_through_a_loss_scale_optimizer():
    optimizer, _ = build(ema_params(average_decay=0.5, dynamic_decay=False))
    wrapped = opt_lib.configure_loss_scale(optimizer, use_float16=True, loss_scale=64)
    assert opt_lib.has_ema(wrapped)
    vs = variables()
    history = []
    for k in (1, 2):
        grads = [g * 64.0 for g in constant_grads(vs, scale=k)]  # as if from a scaled loss
        wrapped.apply_gradients(zip(grads, vs))
        history.append([v.numpy().copy() for v in vs])
    expected = numpy_ema(history, 0.5, dynamic_decay=False, start_step=0)
    for e, a in zip(expected, opt_lib.ema_variables(wrapped)):
        np.testing.assert_allclose(a.numpy(), e, rtol=1e-5, atol=1e-6)
    weights = [v.numpy().copy() for v in vs]
    opt_lib.swap_ema_weights(wrapped, vs)
    np.testing.assert_allclose(vs[0].numpy(), expected[0], rtol=1e-5, atol=1e-6)
    opt_lib.swap_ema_weights(wrapped, vs)
    assert vs[0].numpy().tobytes() == weights[0].tobytes()


def test_ema_averages_are_saved_and_restored_with_the_optimizer(tmp_path):
    optimizer, _ = build(ema_params(average_decay=0.9))
    vs = variables()
    run_steps(optimizer, vs, 3)
    path = tf.train.Checkpoint(optimizer=optimizer, v0=vs[0], v1=vs[1]).save(
        str(tmp_path / "ckpt"))
    saved = [a.numpy().copy() for a in opt_lib.ema_variables(optimizer)]

    fresh_opt, _ = build(ema_params(average_decay=0.9))
    fresh_vs = variables(seed=5)
    status = tf.train.Checkpoint(optimizer=fresh_opt, v0=fresh_vs[0], v1=fresh_vs[1]).restore(
        path)
    fresh_opt.build(fresh_vs)  # deferred restoration fills the averages in at build
    status.assert_consumed()
    assert int(fresh_opt.iterations) == 3
    for s, a in zip(saved, opt_lib.ema_variables(fresh_opt)):
        assert a.numpy().tobytes() == s.tobytes()


def test_ema_config_errors():
    with pytest.raises(ConfigError, match=r"ema\.clipnorm"):
        build(ema_params(clipnorm=1.0))
    with pytest.raises(ConfigError, match=r"ema\.average_decay"):
        build(ema_params(average_decay=1.5))


def _mirrored_ema_report():
    """Trains 4 steps with 2 replicas and swaps EMA weights; returns what the test checks."""
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    config = make_config(ema_params(average_decay=0.9))
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        factory = opt_lib.OptimizerFactory(config)
        optimizer = factory.build_optimizer(factory.build_learning_rate())
        optimizer.build(model.trainable_variables)
    rng = np.random.RandomState(0)
    x, y = rng.randn(8, 3).astype("float32"), rng.randn(8, 2).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step():
        def step_fn(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(features) - labels))
                loss = loss / strategy.num_replicas_in_sync
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        strategy.run(step_fn, args=(next(iterator),))

    def replicas(v):
        return [t.numpy().tolist() for t in strategy.experimental_local_results(v.value)]

    history = []
    for _ in range(4):
        train_step()
        history.append([v.numpy().tolist() for v in model.trainable_variables])
    report = {"history": history,
              "averages": [replicas(a) for a in opt_lib.ema_variables(optimizer)],
              "weights": [replicas(v) for v in model.trainable_variables]}
    with strategy.scope():
        opt_lib.swap_ema_weights(optimizer, model.trainable_variables)
        report["swapped"] = [replicas(v) for v in model.trainable_variables]
        opt_lib.swap_ema_weights(optimizer, model.trainable_variables)
        report["restored"] = [replicas(v) for v in model.trainable_variables]
        swap = tf.function(lambda: opt_lib.swap_ema_weights(optimizer,
                                                            model.trainable_variables))
        swap()
        report["swapped_in_function"] = [replicas(v) for v in model.trainable_variables]
        swap()
        report["restored_in_function"] = [replicas(v) for v in model.trainable_variables]
        report["learning_rate"] = float(opt_lib.learning_rate_value(optimizer))
    return report


_SUBPROCESS = """
import importlib.util, json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
spec = importlib.util.spec_from_file_location("test_optimization_sub", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module  # autograph looks functions up by module
spec.loader.exec_module(module)
print("REPORT" + json.dumps(module._mirrored_ema_report()))
"""


def test_ema_under_mirrored_strategy_with_two_replicas():
    if len(tf.config.list_logical_devices("CPU")) >= 2:
        report = _mirrored_ema_report()
    else:  # TF was initialised with one CPU device: run with two in a fresh process
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
        result = subprocess.run([sys.executable, "-c", _SUBPROCESS, os.path.abspath(__file__)],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                                 check=False)
        assert result.returncode == 0, result.stderr[-3000:]
        report = json.loads(result.stdout.split("REPORT", 1)[1])
    history = [[np.array(w, np.float32) for w in step] for step in report["history"]]
    expected = numpy_ema(history, 0.9, dynamic_decay=True, start_step=0)
    for e, per_replica in zip(expected, report["averages"]):
        for average in per_replica:  # both replicas hold the same, correct average
            np.testing.assert_allclose(average, e, rtol=1e-5, atol=1e-6)
    for key in ("swapped", "swapped_in_function"):
        assert report[key] == report["averages"], key
    for key in ("restored", "restored_in_function"):
        assert report[key] == report["weights"], key
    assert report["weights"] != report["averages"]
    assert report["learning_rate"] == pytest.approx(0.1)


# ---------------------------------------------------------------------------- loss scale
def test_no_loss_scaling_without_float16():
    optimizer, _ = build(sgd())
    assert opt_lib.configure_loss_scale(optimizer, False, "dynamic") is optimizer
    assert opt_lib.configure_loss_scale(optimizer, False, 128.0) is optimizer


@pytest.mark.parametrize("loss_scale", [None, "dynamic"])
def test_dynamic_loss_scale_halves_and_skips_on_non_finite(loss_scale):
    optimizer, _ = build(sgd(lr=1.0))
    wrapped = opt_lib.configure_loss_scale(optimizer, True, loss_scale)
    # Exactly Keras's dynamic optimizer, not the fixed-scale subclass.
    assert type(wrapped) is keras.optimizers.LossScaleOptimizer  # pylint: disable=C0123
    assert wrapped.inner_optimizer is optimizer and wrapped.initial_scale == 2.0 ** 15
    v = keras.Variable(np.ones(2, np.float32))
    wrapped.apply_gradients([(tf.constant([np.inf, 1.0]), v)])
    np.testing.assert_array_equal(v.numpy(), [1.0, 1.0])
    assert float(wrapped.dynamic_scale) == 2.0 ** 14
    wrapped.apply_gradients([(tf.constant([2.0 ** 14, 0.0]), v)])  # unscaled: [1, 0]
    np.testing.assert_allclose(v.numpy(), [0.0, 1.0])


def test_fixed_loss_scale_never_changes():
    optimizer, _ = build(sgd(lr=1.0))
    wrapped = opt_lib.configure_loss_scale(optimizer, True, 128)
    assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
    assert isinstance(wrapped, opt_lib.FixedLossScaleOptimizer)
    assert float(wrapped.scale_loss(tf.constant(2.0))) == 256.0
    v = keras.Variable(np.zeros(2, np.float32))
    for _ in range(3):
        wrapped.apply_gradients([(tf.constant([128.0, -64.0]), v)])  # unscaled: [1, -0.5]
    np.testing.assert_allclose(v.numpy(), [-3.0, 1.5])
    assert int(wrapped.iterations) == 3
    # Like TF2's fixed loss scale, a non-finite step is applied and the scale stays.
    wrapped.apply_gradients([(tf.constant([np.inf, 0.0]), v)])
    assert float(wrapped.dynamic_scale) == 128.0
    assert float(wrapped.scale_loss(tf.constant(1.0))) == 128.0
    assert np.isinf(v.numpy()[0]) and int(wrapped.iterations) == 4
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(wrapped))
    assert isinstance(restored, opt_lib.FixedLossScaleOptimizer)
    assert restored.initial_scale == 128.0


def test_fixed_loss_scale_in_tf_function_matches_unscaled_training():
    plain, _ = build(sgd(lr=0.1, momentum=0.9))
    scaled_inner, _ = build(sgd(lr=0.1, momentum=0.9))
    scaled = opt_lib.configure_loss_scale(scaled_inner, True, 1024.0)
    plain_vs, scaled_vs = variables(), variables()

    def make_step(optimizer, vs):
        optimizer.build(vs)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.add_n([tf.reduce_sum(tf.square(v)) for v in vs])
                if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                    loss = optimizer.scale_loss(loss)
            optimizer.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return step

    plain_step, scaled_step = make_step(plain, plain_vs), make_step(scaled, scaled_vs)
    for _ in range(3):
        plain_step()
        scaled_step()
    assert float(scaled.dynamic_scale) == 1024.0
    for p, s in zip(plain_vs, scaled_vs):
        np.testing.assert_allclose(s.numpy(), p.numpy(), rtol=1e-6)


@pytest.mark.parametrize("bad", ["static", -1.0, 0, True])
def test_bad_loss_scale_is_a_config_error(bad):
    optimizer, _ = build(sgd())
    with pytest.raises(ConfigError, match="runtime.loss_scale"):
        opt_lib.configure_loss_scale(optimizer, True, bad)


def test_configs_import_without_tensorflow():
    code = ("import sys; import lite_launcher.optimization; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.stdout.split() == ["False", "False"]


# ------------------------------------------- TFM's power and step-cosine schedules (issue 10)
def _lr(kind, **params):
    return build({"optimizer": {"type": "sgd"},
                  "learning_rate": {"type": kind, kind: params}})[1]


def test_power_schedule_is_initial_times_step_to_the_power():
    lr = _lr("power", initial_learning_rate=2.0)  # TFM's default power: -0.5 (sqrt decay)
    steps = np.array([0, 1, 4, 100, 12345])
    np.testing.assert_allclose(schedule_values(lr, steps),
                               2.0 * np.maximum(steps, 1) ** -0.5, rtol=1e-6)


def test_power_linear_schedule_decays_linearly_to_zero_over_the_last_fraction():
    lr = _lr("power_linear", initial_learning_rate=1.0, total_decay_steps=100, power=-0.5,
             linear_decay_fraction=0.2, offset=10)
    steps = np.array([0, 10, 11, 50, 90, 95, 105, 110, 200])
    s = steps - 10.0
    expected = np.maximum(s, 1) ** -0.5 * np.clip((100 - s) / 20.0, None, 1.0)
    np.testing.assert_allclose(schedule_values(lr, steps), np.maximum(expected, 0.0),
                               rtol=1e-6, atol=1e-9)
    assert schedule_values(lr, [110])[0] == 0.0  # the end of the decay


def test_power_with_offset_schedule_holds_the_pre_offset_rate_then_decays():
    lr = _lr("power_with_offset", initial_learning_rate=3.0, power=-1.0, offset=50,
             pre_offset_learning_rate=0.5)
    steps = np.array([0, 49, 50, 51, 56, 150])
    decayed = 3.0 * np.maximum(steps - 50.0, 1.0) ** -1.0
    expected = np.minimum(np.where(steps > 50, decayed, 0.5), 0.5)
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6)
    np.testing.assert_allclose(schedule_values(lr, [56, 150]), [0.5, 0.03], rtol=1e-6)


def test_step_cosine_with_offset_schedule_closed_form():
    lr = _lr("step_cosine_with_offset", boundaries=[0, 100, 300], values=[1.0, 0.5, 0.1],
             offset=20)

    def expected(step):
        s = max(step - 20.0, 0.0)
        if s < 100:
            return 0.5 * (math.cos(math.pi * s / 100) + 1) / 2 + 0.5
        if s < 300:
            return 0.4 * (math.cos(math.pi * (s - 100) / 200) + 1) / 2 + 0.1
        return 0.1  # after the last boundary: the last value (TFM divides by zero)

    steps = [0, 20, 70, 119, 120, 220, 319, 320, 5000]
    np.testing.assert_allclose(schedule_values(lr, steps), [expected(s) for s in steps],
                               rtol=1e-5)


def test_step_cosine_with_linear_warmup_gives_tfm_values():
    # The numbers of TFM's optimizer_factory_test (step_cosine_with_offset + linear warmup).
    _, lr = build({"optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                   "learning_rate": {"type": "step_cosine_with_offset",
                                     "step_cosine_with_offset": {
                                         "values": [0.0001, 0.00005],
                                         "boundaries": [0, 500000], "offset": 10000}},
                   "warmup": {"type": "linear", "linear": {"warmup_steps": 10000,
                                                           "warmup_learning_rate": 0.0}}})
    steps = [0, 5000, 10000, 20000, 499999]
    np.testing.assert_allclose(schedule_values(lr, steps),
                               [0.0, 1e-4 / 2.0, 1e-4, 9.994863e-05, 5e-05], atol=5e-8)


@pytest.mark.parametrize("params,message", [
    ({"type": "power"}, r"learning_rate\.power\.initial_learning_rate must be set"),
    ({"type": "power_linear", "power_linear": {"initial_learning_rate": 1.0}},
     r"learning_rate\.power_linear\.total_decay_steps must be set"),
    ({"type": "step_cosine_with_offset",
      "step_cosine_with_offset": {"boundaries": [0, 10], "values": [1.0]}},
     r"as many entries as learning_rate\.step_cosine_with_offset\.boundaries"),
    ({"type": "step_cosine_with_offset",
      "step_cosine_with_offset": {"boundaries": [10, 10], "values": [1.0, 0.5]}},
     r"strictly increasing"),
])
def test_new_schedules_check_their_fields(params, message):
    with pytest.raises(ConfigError, match=message):
        make_config({"optimizer": {"type": "sgd"}, "learning_rate": params}).validate()


def test_new_schedules_round_trip_through_keras_serialization():
    for lr in (_lr("power", initial_learning_rate=1.0),
               _lr("power_linear", initial_learning_rate=1.0, total_decay_steps=10),
               _lr("power_with_offset", initial_learning_rate=1.0, offset=3),
               _lr("step_cosine_with_offset", boundaries=[0, 8], values=[1.0, 0.1])):
        again = keras.optimizers.schedules.deserialize(
            json.loads(json.dumps(keras.optimizers.schedules.serialize(lr))))
        steps = [0, 2, 5, 9, 20]
        np.testing.assert_allclose(schedule_values(again, steps), schedule_values(lr, steps))


# ---------------------------------------------------------------- TFM's LARS (issue 10)
def _numpy_lars(weights, grads_per_step, lr, momentum, eeta, wd, nesterov, classic,
                decayed, adapted):
    ws = [w.astype(np.float64).copy() for w in weights]
    vs = [np.zeros_like(w) for w in ws]
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            w, v = ws[i], vs[i]
            g = g.astype(np.float64) + (wd * w if decayed[i] else 0.0)

            def ratio(d):
                wn, dn = np.linalg.norm(w), np.linalg.norm(d)
                return eeta * wn / dn if wn > 0 and dn > 0 else 1.0

            if classic:
                scaled = lr * (ratio(g) if adapted[i] else 1.0)
                v_new = momentum * v + scaled * g
                update = momentum * v_new + scaled * g if nesterov else v_new
            else:
                v_new = momentum * v + g
                raw = momentum * v_new + g if nesterov else v_new
                update = lr * (ratio(raw) if adapted[i] else 1.0) * raw
            ws[i], vs[i] = w - update, v_new
    return ws


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("classic", [True, False])
def test_lars_matches_numpy(classic, nesterov):
    layer = keras.layers.Dense(3, name="dense")
    layer.build((None, 2))
    vs = layer.trainable_variables  # paths dense/kernel, dense/bias
    rng = np.random.RandomState(3)
    for v in vs:
        v.assign(rng.randn(*v.shape).astype("float32"))
    start = [v.numpy().copy() for v in vs]
    optimizer, _ = build({"optimizer": {"type": "lars", "lars": {
        "momentum": 0.8, "eeta": 0.05, "weight_decay_rate": 0.1, "nesterov": nesterov,
        "classic_momentum": classic, "exclude_from_weight_decay": ["bias"],
        "exclude_from_layer_adaptation": ["bias"]}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.3}}})
    grads = [[rng.randn(*v.shape).astype("float32") for v in vs] for _ in range(4)]
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], vs))
    expected = _numpy_lars(start, grads, 0.3, 0.8, 0.05, 0.1, nesterov, classic,
                           decayed=[True, False], adapted=[True, False])
    for v, e in zip(vs, expected):
        np.testing.assert_allclose(v.numpy(), e, rtol=2e-5, atol=1e-6)


def test_lars_config_has_tfm_defaults_and_exclusions_default_to_the_weight_decay_ones():
    optimizer, _ = build({"optimizer": {"type": "lars", "lars": {
        "exclude_from_weight_decay": ["bias"]}}, "learning_rate": {"type": "constant"}})
    assert isinstance(optimizer, opt_lib.LARS)
    assert (optimizer.momentum, optimizer.eeta, optimizer.weight_decay_rate,
            optimizer.nesterov, optimizer.classic_momentum) == (0.9, 0.001, 0.0, False, True)
    assert optimizer.exclude_from_layer_adaptation == ["bias"]
    config = opt_lib.LARS.from_config(optimizer.get_config())
    assert config.eeta == 0.001 and config.exclude_from_weight_decay == ["bias"]


# -------------------------------------------------- build_optimizer(postprocessor=) (TFM)
def test_build_optimizer_applies_the_postprocessor():
    factory = opt_lib.OptimizerFactory(make_config(sgd(lr=0.2)))
    seen = []

    def postprocessor(optimizer):
        seen.append(optimizer)
        return keras.optimizers.LossScaleOptimizer(optimizer)

    optimizer = factory.build_optimizer(factory.build_learning_rate(),
                                        postprocessor=postprocessor)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert optimizer.inner_optimizer is seen[0]
    assert isinstance(seen[0], keras.optimizers.SGD)
    with pytest.raises(TypeError, match="postprocessor returned str"):
        factory.build_optimizer(0.1, postprocessor=lambda optimizer: "not an optimizer")


# ---------------------------------------- EMA over all weights (trainable_weights_only: false)
def _bn_ema_trainer(trainable_weights_only=False, strategy=None):
    import tiny  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    class BatchNormTinyTask(tiny.TinyTask):
        def build_model(self):
            init = keras.initializers.GlorotUniform(seed=1)
            return keras.Sequential([
                keras.Input((tiny.NUM_FEATURES,)),
                keras.layers.Dense(5, kernel_initializer=init),
                keras.layers.BatchNormalization(momentum=0.5),
                keras.layers.Dense(tiny.NUM_CLASSES, kernel_initializer=init)])

    config = tiny.make_config(steps_per_loop=1, summary_interval=1)
    config.trainer.optimizer_config.override({"ema": {
        "average_decay": 0.6, "dynamic_decay": False,
        "trainable_weights_only": trainable_weights_only}})
    with (strategy or tf.distribute.get_strategy()).scope():
        task = BatchNormTinyTask(config.task)
        model = task.build_model()
        optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        return ll.Trainer(config, task, model, optimizer)


def test_ema_of_all_weights_averages_batchnorm_statistics_as_numpy():
    trainer = _bn_ema_trainer()
    statistics = trainer.model.non_trainable_variables  # moving mean and variance
    assert [v.path.split("/")[-1] for v in statistics] == ["moving_mean", "moving_variance"]
    history = []
    for _ in range(4):
        trainer.train(tf.constant(1))
        history.append([v.numpy().astype(np.float64) for v in statistics])
    expected = [h.copy() for h in history[0]]  # the first update copies (as Keras's EMA)
    for values in history[1:]:
        expected = [0.6 * e + 0.4 * v for e, v in zip(expected, values)]
    current = [v.numpy().copy() for v in statistics]
    trainer.swap_weights()
    for v, e in zip(statistics, expected):
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-5, atol=1e-7)
    assert not np.allclose(statistics[0].numpy(), current[0])  # an average, not the weights
    trainer.swap_weights()
    for v, c in zip(statistics, current):
        np.testing.assert_array_equal(v.numpy(), c)  # swapping back restores bit for bit


def test_ema_of_trainable_weights_only_leaves_batchnorm_statistics_alone():
    trainer = _bn_ema_trainer(trainable_weights_only=True)
    trainer.train(tf.constant(2))
    statistics = [v.numpy().copy() for v in trainer.model.non_trainable_variables]
    trainer.swap_weights()
    for v, s in zip(trainer.model.non_trainable_variables, statistics):
        np.testing.assert_array_equal(v.numpy(), s)


def test_ema_of_all_weights_skips_integer_state_such_as_dropout_seeds():
    # Keras 3 keeps Dropout's int64 seed in non_trainable_variables; averaging it crashed
    # (TypeError: Expected int64, but got 1.0). Only floating-point state is averaged.
    import tiny  # pylint: disable=import-outside-toplevel
    import lite_launcher as ll  # pylint: disable=import-outside-toplevel

    class DropoutBatchNormTask(tiny.TinyTask):
        def build_model(self):
            return keras.Sequential([
                keras.Input((tiny.NUM_FEATURES,)), keras.layers.Dense(5),
                keras.layers.BatchNormalization(), keras.layers.Dropout(0.5, seed=3),
                keras.layers.Dense(tiny.NUM_CLASSES)])

    config = tiny.make_config(steps_per_loop=1, summary_interval=1)
    config.trainer.optimizer_config.override({"ema": {"trainable_weights_only": False}})
    task = DropoutBatchNormTask(config.task)
    model = task.build_model()
    assert any(not v.dtype.startswith("float") for v in model.non_trainable_variables)
    trainer = ll.Trainer(config, task, model,
                         task.create_optimizer(config.trainer.optimizer_config, config.runtime))
    trainer.train(tf.constant(2))
    seeds = [v.numpy().copy() for v in model.non_trainable_variables
             if not v.dtype.startswith("float")]
    trainer.swap_weights()
    after = [v.numpy() for v in model.non_trainable_variables if not v.dtype.startswith("float")]
    for s, a in zip(seeds, after):
        np.testing.assert_array_equal(s, a)  # integer state is never swapped
    trainer.swap_weights()


def test_batchnorm_averages_are_saved_and_restored_with_the_checkpoint(tmp_path):
    trainer = _bn_ema_trainer()
    trainer.train(tf.constant(3))
    trainer.swap_weights()
    averaged = [v.numpy().copy() for v in trainer.model.non_trainable_variables]
    trainer.swap_weights()
    path = trainer.checkpoint.save(str(tmp_path / "ckpt"))
    restored = _bn_ema_trainer()
    restored.checkpoint.restore(path).assert_existing_objects_matched()
    restored.swap_weights()
    for v, a in zip(restored.model.non_trainable_variables, averaged):
        np.testing.assert_array_equal(v.numpy(), a)


def test_ema_of_all_weights_under_mirrored_strategy_averages_each_replicas_statistics():
    # Keras 3 keeps BatchNorm statistics per replica; each replica averages its own copy.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    trainer = _bn_ema_trainer(strategy=strategy)
    statistics = trainer.model.non_trainable_variables

    def per_replica():
        return [[r.numpy().astype(np.float64) for r in v.value.values] for v in statistics]

    history = []
    for _ in range(3):
        trainer.train(tf.constant(1))
        history.append(per_replica())
    expected = history[0]
    for values in history[1:]:
        expected = [[0.6 * e + 0.4 * v for e, v in zip(es, vs)]
                    for es, vs in zip(expected, values)]
    trainer.swap_weights()
    for got_replicas, expected_replicas in zip(per_replica(), expected):
        for got, want in zip(got_replicas, expected_replicas):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_lamb_exclusions_match_the_layer_in_the_variable_path():
    # TFM's BERT configs exclude ["LayerNorm", "layer_norm", "bias"]: patterns name layers, so
    # they must be searched in the variable path (`layer_norm/kernel`), not the bare name.
    def one_step(layer_name, weight_decay_rate):
        layer = keras.layers.Dense(3, name=layer_name, use_bias=False,
                                   kernel_initializer=keras.initializers.Constant(0.5))
        layer.build((None, 2))
        optimizer, _ = build({"optimizer": {"type": "lamb", "lamb": {
            "weight_decay_rate": weight_decay_rate, "exclude_from_weight_decay": ["layer_norm"]}},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}}})
        grad = tf.constant(np.arange(6, dtype="float32").reshape(2, 3) / 6.0)
        optimizer.apply_gradients([(grad, layer.kernel)])
        return layer.kernel.numpy()

    excluded, kept = one_step("layer_norm", 0.5), one_step("dense_kept", 0.5)
    np.testing.assert_array_equal(excluded, one_step("layer_norm_ref", 0.0))
    assert not np.allclose(kept, excluded)  # the kept layer is decayed


# ------------------------------------- Offset and the factory's registration (issue 13)
def test_offset_shifts_any_keras_schedule_and_round_trips():
    cosine = keras.optimizers.schedules.CosineDecay(1.0, 10, alpha=0.1)
    shifted = opt_lib.Offset(cosine, offset=3)
    steps = [0, 2, 3, 5, 13, 20]
    s = np.maximum(np.array(steps) - 3.0, 0.0)
    expected = 0.9 * 0.5 * (1 + np.cos(np.pi * np.minimum(s, 10) / 10)) + 0.1
    np.testing.assert_allclose(schedule_values(shifted, steps), expected, rtol=1e-6)
    restored = keras.optimizers.schedules.deserialize(
        json.loads(json.dumps(keras.optimizers.schedules.serialize(shifted))))
    assert type(restored) is opt_lib.Offset and restored.offset == 3
    np.testing.assert_allclose(schedule_values(restored, steps), expected, rtol=1e-6)


def test_tfm_offset_names_are_offsets_with_tfm_style_configs():
    lr = opt_lib.ExponentialDecayWithOffset(0.4, 5, 0.5, staircase=True, offset=2)
    assert isinstance(lr, opt_lib.Offset)
    config = lr.get_config()  # the Keras schedule's fields plus offset, as TFM's
    assert config["initial_learning_rate"] == 0.4 and config["offset"] == 2
    again = opt_lib.ExponentialDecayWithOffset.from_config(config)
    steps = [0, 2, 6, 7, 12, 30]
    expected = 0.4 * 0.5 ** np.floor(np.maximum(np.array(steps) - 2, 0) / 5)
    np.testing.assert_allclose(schedule_values(lr, steps), expected, rtol=1e-6)
    np.testing.assert_allclose(schedule_values(again, steps), expected, rtol=1e-6)


class ScaledSGD(keras.optimizers.Optimizer):
    """Test optimizer: var -= learning_rate * scale * gradient."""

    def __init__(self, learning_rate=0.01, scale=1.0, name="ScaledSGD", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.scale = scale

    def update_step(self, gradient, variable, learning_rate):
        self.assign_sub(variable, learning_rate * self.scale * gradient)


class ScaledSGDWithEMASchedule(opt_lib.EMAScheduleMixin, ScaledSGD):
    pass


@dataclasses.dataclass
class ScaledSGDConfig(opt_lib.BaseOptimizerConfig):
    scale: float = 2.0


@dataclasses.dataclass
class HalvingLrConfig(ll.Config):
    learning_rate: float = 0.8
    every: int = 2


class Halving(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, learning_rate, every):
        self.learning_rate, self.every = learning_rate, every

    def __call__(self, step):
        halvings = tf.floor(tf.cast(step, tf.float32) / self.every)
        return self.learning_rate * tf.pow(0.5, halvings)


@dataclasses.dataclass
class RegTestOptimizerConfig(opt_lib.OptimizerConfig):
    regtest_scaled: ScaledSGDConfig = dataclasses.field(default_factory=ScaledSGDConfig)


@dataclasses.dataclass
class RegTestLrConfig(opt_lib.LrConfig):
    regtest_halving: HalvingLrConfig = dataclasses.field(default_factory=HalvingLrConfig)


@dataclasses.dataclass
class HoldWarmupConfig(ll.Config):
    steps: int = 1
    rate: float = 0.05


class HoldWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """Test warmup: `rate` for the first `steps` steps, then the schedule."""

    def __init__(self, schedule, steps, rate):
        self.schedule, self.steps, self.rate = schedule, steps, rate

    def __call__(self, step):
        return tf.where(tf.cast(step, tf.int64) < self.steps, self.rate, self.schedule(step))


@dataclasses.dataclass
class RegTestWarmupConfig(opt_lib.WarmupConfig):
    regtest_hold: HoldWarmupConfig = dataclasses.field(default_factory=HoldWarmupConfig)


@dataclasses.dataclass
class RegTestOptimizationConfig(opt_lib.OptimizationConfig):
    optimizer: RegTestOptimizerConfig = dataclasses.field(default_factory=RegTestOptimizerConfig)
    learning_rate: RegTestLrConfig = dataclasses.field(default_factory=RegTestLrConfig)
    warmup: RegTestWarmupConfig = dataclasses.field(default_factory=RegTestWarmupConfig)


@pytest.fixture
def registered_test_classes():
    factory_lib = opt_lib.optimizer_factory
    opt_lib.register_optimizer_cls("regtest_scaled", ScaledSGD)
    opt_lib.register_learning_rate_cls("regtest_halving", Halving)
    opt_lib.register_warmup_cls("regtest_hold", HoldWarmup)
    yield
    factory_lib.OPTIMIZERS_CLS.pop("regtest_scaled")
    factory_lib.LR_CLS.pop("regtest_halving")
    factory_lib.WARMUP_CLS.pop("regtest_hold")


def _regtest_config(**ema):
    return RegTestOptimizationConfig().override({
        "optimizer": {"type": "regtest_scaled", "regtest_scaled": {"scale": 3.0}},
        "learning_rate": {"type": "regtest_halving"},
        **({"ema": ema} if ema else {})})


def test_registered_optimizer_and_schedule_are_built_from_their_config(registered_test_classes):
    factory = opt_lib.OptimizerFactory(_regtest_config())
    lr = factory.build_learning_rate()
    optimizer = factory.build_optimizer(lr)
    assert type(optimizer) is ScaledSGD and optimizer.scale == 3.0
    np.testing.assert_allclose(schedule_values(lr, [0, 1, 2, 5]), [0.8, 0.8, 0.4, 0.2])
    var = keras.Variable(np.ones(2, "float32"))
    expected = np.ones(2)
    for step in range(3):
        optimizer.apply_gradients([(tf.constant([1.0, -2.0]), var)])
        expected -= [0.8, 0.8, 0.4][step] * 3.0 * np.array([1.0, -2.0])
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-6)


def test_registered_optimizer_gets_an_ema_class_for_tfms_ema_schedule(registered_test_classes):
    factory = opt_lib.OptimizerFactory(_regtest_config(average_decay=0.5))
    derived = factory.build_optimizer(0.1)  # no ema_cls registered: the mixin is added
    assert type(derived).__name__ == "ScaledSGDWithEMASchedule"
    assert isinstance(derived, ScaledSGD) and isinstance(derived, opt_lib.ExponentialMovingAverage)
    assert type(factory.build_optimizer(0.1)) is type(derived)  # one class, made once
    plain_ema = opt_lib.OptimizerFactory(_regtest_config(average_decay=0.5,
                                                         dynamic_decay=False))
    assert type(plain_ema.build_optimizer(0.1)) is type(derived)
    opt_lib.optimizer_factory.OPTIMIZERS_CLS.pop("regtest_scaled")
    opt_lib.register_optimizer_cls("regtest_scaled", ScaledSGD, ema_cls=ScaledSGDWithEMASchedule)
    optimizer = factory.build_optimizer(0.1)
    assert type(optimizer) is ScaledSGDWithEMASchedule and optimizer.ema_dynamic_decay


def test_registering_a_key_twice_is_a_value_error():
    with pytest.raises(ValueError, match="'sgd' is already registered"):
        opt_lib.register_optimizer_cls("sgd", ScaledSGD)
    with pytest.raises(ValueError, match="'cosine' is already registered"):
        opt_lib.register_learning_rate_cls("cosine", Halving)
    with pytest.raises(ValueError, match="'linear' is already registered"):
        opt_lib.register_warmup_cls("linear", opt_lib.LinearWarmup)


def test_registered_warmup_wraps_the_schedule(registered_test_classes):
    config = _regtest_config()
    config.override({"warmup": {"type": "regtest_hold", "regtest_hold": {"steps": 3}}})
    lr = opt_lib.OptimizerFactory(config).build_learning_rate()
    assert isinstance(lr, HoldWarmup) and isinstance(lr.schedule, Halving)
    np.testing.assert_allclose(schedule_values(lr, [0, 2, 3, 4]), [0.05, 0.05, 0.4, 0.2])


def _apply_graph_op_list(optimizer):
    """The op types of one traced `apply_gradients` of `optimizer` on fresh variables."""
    vs = variables()
    optimizer.build(vs)
    grads = constant_grads(vs)
    fn = tf.function(lambda: optimizer.apply_gradients(zip(grads, vs)))
    return [op.type for op in fn.get_concrete_function().graph.get_operations()]


def _apply_graph_ops(optimizer):
    return set(_apply_graph_op_list(optimizer))


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_fused_momentum_equals_keras_sgd_in_one_kernel(nesterov):
    """`optimizer.type: sgd` runs TF's ResourceApplyKerasMomentum (tf_keras's kernel) and
    lands where Keras 3's SGD does; without momentum it is Keras's graph."""
    fused, _ = build(sgd(lr=0.1, momentum=0.9, nesterov=nesterov))
    assert isinstance(fused, opt_lib.SGD) and isinstance(fused, keras.optimizers.SGD)
    reference = keras.optimizers.SGD(0.1, momentum=0.9, nesterov=nesterov)
    fused_vs, reference_vs = variables(), variables()
    for k in range(1, 4):
        fused.apply_gradients(zip(constant_grads(fused_vs, scale=k), fused_vs))
        reference.apply_gradients(zip(constant_grads(reference_vs, scale=k), reference_vs))
    for a, b in zip(fused_vs, reference_vs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    for a, b in zip(fused.momentums, reference.momentums):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert "ResourceApplyKerasMomentum" in _apply_graph_ops(
        build(sgd(lr=0.1, momentum=0.9, nesterov=nesterov))[0])
    assert "ResourceApplyKerasMomentum" not in _apply_graph_ops(
        keras.optimizers.SGD(0.1, momentum=0.9))
    assert "ResourceApplyKerasMomentum" not in _apply_graph_ops(build(sgd(lr=0.1))[0])


@pytest.mark.parametrize("make_optimizer", [
    lambda: build(sgd(lr=0.1, momentum=0.9))[0], lambda: opt_lib.Adam(0.01)],
    ids=["sgd_momentum", "adam"])
def test_fused_update_under_mirrored_strategy_equals_one_device(make_optimizer):
    """Each replica's variable and slots go through the fused kernel in the strategy's update
    context: two replicas with half the gradient each land where one device does."""
    strategy = ll.get_distribution_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = make_optimizer()
        mirrored_vs = variables()
        mirrored.build(mirrored_vs)

    @tf.function
    def step(k):
        def replica_step():
            grads = [g * tf.cast(k, tf.float32) * 0.5 for g in constant_grads(mirrored_vs)]
            mirrored.apply_gradients(zip(grads, mirrored_vs))
        strategy.run(replica_step)

    single = make_optimizer()
    single_vs = variables()
    for k in range(1, 4):
        step(tf.constant(k))
        single.apply_gradients(zip(constant_grads(single_vs, scale=k), single_vs))
    for a, b in zip(mirrored_vs, single_vs):
        for replica_value in strategy.experimental_local_results(a.value):
            np.testing.assert_allclose(replica_value.numpy(), b.numpy(), rtol=1e-6)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_fused_update_equals_keras_rmsprop_in_one_kernel(centered):
    """`optimizer.type: rmsprop` with momentum runs tf_keras's ResourceApply(Centered)RMSProp
    and lands where Keras 3's RMSprop does; without momentum it is Keras's graph."""
    arguments = {"rho": 0.9, "momentum": 0.9, "epsilon": 0.002, "centered": centered}
    fused, _ = build({"optimizer": {"type": "rmsprop", "rmsprop": arguments},
                      "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}}})
    assert isinstance(fused, opt_lib.RMSprop) and isinstance(fused, keras.optimizers.RMSprop)
    reference = keras.optimizers.RMSprop(0.01, **arguments)
    fused_vs, reference_vs = variables(), variables()
    for k in range(1, 4):
        fused.apply_gradients(zip(constant_grads(fused_vs, scale=k), fused_vs))
        reference.apply_gradients(zip(constant_grads(reference_vs, scale=k), reference_vs))
    for a, b in zip(fused_vs + fused.variables[1:], reference_vs + reference.variables[1:]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
    kernel = "ResourceApplyCenteredRMSProp" if centered else "ResourceApplyRMSProp"
    assert kernel in _apply_graph_ops(opt_lib.RMSprop(0.01, **arguments))
    assert kernel not in _apply_graph_ops(keras.optimizers.RMSprop(0.01, **arguments))
    without_momentum = opt_lib.RMSprop(0.01, rho=0.9, centered=centered)
    assert kernel not in _apply_graph_ops(without_momentum)


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_adam_fused_update_equals_keras_adam_in_one_kernel(kind):
    """`optimizer.type: adam` / `adamw` run tf_keras's ResourceApplyAdam and land where Keras
    3's Adam / AdamW do (to float32 rounding); `amsgrad` is Keras's graph."""
    branch = {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-6}
    if kind == "adamw":
        branch.update(weight_decay_rate=0.1, gradient_clip_norm=0.0)  # no clipping
    fused, _ = build({"optimizer": {"type": kind, kind: branch},
                      "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}}})
    keras_cls = keras.optimizers.AdamW if kind == "adamw" else keras.optimizers.Adam
    assert isinstance(fused, opt_lib.FusedAdamUpdate) and isinstance(fused, keras_cls)
    arguments = {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-6}
    if kind == "adamw":
        arguments["weight_decay"] = 0.1
    reference = keras_cls(0.01, **arguments)
    fused_vs, reference_vs = variables(), variables()
    for k in range(1, 6):
        fused.apply_gradients(zip(constant_grads(fused_vs, scale=k), fused_vs))
        reference.apply_gradients(zip(constant_grads(reference_vs, scale=k), reference_vs))
    for a, b in zip(fused_vs + fused.variables, reference_vs + reference.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
    lite_cls = opt_lib.AdamW if kind == "adamw" else opt_lib.Adam
    assert "ResourceApplyAdam" in _apply_graph_ops(lite_cls(0.01, **arguments))
    assert "ResourceApplyAdam" not in _apply_graph_ops(keras_cls(0.01, **arguments))
    assert "ResourceApplyAdam" not in _apply_graph_ops(lite_cls(0.01, amsgrad=True, **arguments))


def test_adam_bias_correction_powers_are_traced_once_per_apply_not_per_variable():
    """Like tf_keras's `_prepare_local`: one `beta**t` pair per apply and dtype, shared by
    every variable's ResourceApplyAdam (per variable it was 7 scalar ops each)."""
    for optimizer in (opt_lib.Adam(0.01), opt_lib.AdamW(0.01, weight_decay=0.1)):
        types = _apply_graph_op_list(optimizer)
        assert types.count("ResourceApplyAdam") == len(variables()) == 2
        assert types.count("Pow") == 2, types.count("Pow")
        assert optimizer.__dict__["_adam_powers"] is None  # nothing held between applies


def test_adam_lands_where_tfms_tf_keras_adam_does():
    """20 steps of `optimization.Adam` against TFM's own (tf_keras's legacy Adam, run by
    tests/data/make_tfm_adam_reference.py in TFM's venv): equal to within one float32 ulp
    (measured: bit-equal); Keras 3's unfused Adam is 7.7e-7 away and would fail."""
    import importlib.util
    import json

    data_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    spec = importlib.util.spec_from_file_location(
        "make_tfm_adam_reference", os.path.join(data_dir, "make_tfm_adam_reference.py"))
    with open(os.path.join(data_dir, "tfm_adam_reference.json")) as f:
        reference = json.load(f)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # its inputs() is NumPy only; tf_keras loads in main()
    init, grads = script.inputs()
    variables = [tf.Variable(v) for v in init]
    optimizer = opt_lib.Adam(reference["learning_rate"], beta_1=reference["beta_1"],
                             beta_2=reference["beta_2"], epsilon=reference["epsilon"])

    @tf.function
    def step(g):
        optimizer.apply_gradients(zip(g, variables))

    for g in grads:
        step([tf.constant(x) for x in g])
    for variable, expected in zip(variables, reference["values"]):
        np.testing.assert_allclose(variable.numpy().ravel(), np.float32(expected),
                                   rtol=0, atol=2.5e-7)


def _iteration_increment_ops(optimizer):
    graph = tf.function(lambda: optimizer.iterations.assign_add(1)).get_concrete_function().graph
    return sorted(op.type for op in graph.get_operations()
                  if op.type in ("AssignAddVariableOp", "AssignVariableOp"))


def test_step_counts_become_one_atomic_increment_under_parameter_servers():
    """Keras 3 increments `iterations` with a read then an assign: parameter-server workers
    stepping concurrently lose increments (tests/reliability/test_multi_worker_faults.py shows
    it across processes). `make_step_counts_atomic` turns it into one AssignAddVariableOp, for
    the inner optimizers of a MultiOptimizer too."""
    sgd = keras.optimizers.SGD(0.1)
    assert _iteration_increment_ops(sgd) == ["AssignVariableOp"]  # Keras's own: not atomic
    inner = [keras.optimizers.Adam(0.1), keras.optimizers.SGD(0.2)]
    multi = keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
        default_optimizer=inner[0], optimizer_map={".*bias.*": inner[1]}))
    opt_lib.make_step_counts_atomic([sgd, multi])
    for optimizer in [sgd] + inner:
        assert _iteration_increment_ops(optimizer) == ["AssignAddVariableOp"], optimizer
    kernel = keras.Variable(np.ones((2, 1), "float32"))
    sgd.apply([tf.ones((2, 1))], [kernel])
    sgd.apply([tf.ones((2, 1))], [kernel])
    assert int(sgd.iterations.numpy()) == 2
    np.testing.assert_allclose(kernel.numpy(), 0.8)
