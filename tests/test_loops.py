"""`loops.TrainLoop` / `EvalLoop` (the runner layer) and the one config check of the runtime."""

import os

import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_trainer import fuses_train_loop_end
from lite_launcher.orbit import loops

import tiny


@pytest.mark.parametrize("tensor_num_steps", [False, True])
def test_train_loop_continues_its_iterator_and_restarts_on_a_new_dataset(tensor_num_steps):
    total = tf.Variable(0, dtype=tf.int64)

    def step(iterator):
        total.assign_add(next(iterator))

    loop = loops.TrainLoop(tf.data.Dataset.range(100), tensor_num_steps=tensor_num_steps)
    assert loop.iterator is None and loop.loop_fn is None
    with pytest.raises(RuntimeError, match="set_loop_fn"):
        loop.run(1)
    loop.set_loop_fn(loops.make_train_loop(step, use_tf_function=True,
                                           use_tf_while_loop=tensor_num_steps))
    loop.run(3)  # 0 + 1 + 2
    loop.run(2)  # 3 + 4: the same iterator continues
    assert int(total.numpy()) == 10
    loop.set_dataset(tf.data.Dataset.range(100, 200))
    assert loop.iterator is None
    loop.run(2)  # 100 + 101: the new dataset, from the top
    assert int(total.numpy()) == 211


@pytest.mark.parametrize("eval_tf_while_loop", [False, True])
def test_eval_loop_reads_from_the_top_and_folds_a_state(eval_tf_while_loop):
    def step(iterator):
        return next(iterator)

    def build(has_state):
        return loops.make_eval_loop(step, has_state=has_state, use_tf_function=True,
                                    use_tf_while_loop=eval_tf_while_loop)

    eval_loop = loops.EvalLoop(in_graph=eval_tf_while_loop, scheduled=False)
    stateful, stateless = build(True), build(False)
    dataset = tf.data.Dataset.range(10, 20)
    reduce_fn = lambda state, value: state + value  # noqa: E731
    for _ in range(2):  # each run starts at the dataset's first element
        state = eval_loop.run(stateful, dataset, 4, state=tf.constant(0, tf.int64),
                              reduce_fn=reduce_fn)
        assert int(state) == 10 + 11 + 12 + 13
    assert eval_loop.run(stateless, dataset, 2) is None


def test_eval_loop_of_fixed_length_refuses_minus_one_before_anything_runs():
    eval_loop = loops.EvalLoop(in_graph=True, scheduled=False)
    with pytest.raises(ValueError, match="eval_tf_while_loop=True"):
        eval_loop.check_num_steps(-1)
    with pytest.raises(ValueError, match="eval_tf_while_loop=True"):
        eval_loop.run(lambda *args, **kwargs: pytest.fail("ran"), tf.data.Dataset.range(3), -1)
    eval_loop.check_num_steps(5)
    loops.EvalLoop(in_graph=False, scheduled=False).check_num_steps(-1)


def test_trainer_loop_end_fusion_follows_its_documented_rule():
    assert fuses_train_loop_end(tiny.make_trainer())
    assert not fuses_train_loop_end(
        tiny.make_trainer(tiny.make_config(train_tf_while_loop=False)))

    class OwnLoopEnd(ll.Trainer):
        def train_loop_end(self):
            logs = super().train_loop_end()
            logs["extra"] = 1.0
            return logs

    trainer = tiny.make_trainer(trainer_cls=OwnLoopEnd)
    logs = trainer.train(3)
    # Not fused: the override ran eagerly after the loop, on metrics the loop did not reset.
    assert not trainer._train_loop_fused and logs["extra"] == 1.0
    assert 0.0 <= float(logs["accuracy"]) <= 1.0 and int(trainer.global_step.numpy()) == 3


def test_runner_validates_a_config_built_in_code(tmp_path):
    config = tiny.make_config(steps_per_loop=2, summary_interval=3)
    task = tiny.TinyTask(config.task)
    model_dir = str(tmp_path / "model")
    with pytest.raises(ll.ConfigError, match=r"trainer.summary_interval \(3\) must be a multiple"):
        ll.run_experiment(distribution_strategy=tf.distribute.get_strategy(), task=task,
                          mode="train", params=config, model_dir=model_dir)
    assert not os.path.exists(model_dir) or os.listdir(model_dir) == []


def test_strategy_checks_refuse_what_parameter_servers_cannot_run():
    whole_set = ll.TrainerConfig(validation_steps=-1)
    whole_set.validate_for_strategy(parameter_servers=False)
    whole_set.validate_for_strategy(parameter_servers=True, evaluates=False)
    with pytest.raises(ll.ConfigError, match="validation_steps > 0"):
        whole_set.validate_for_strategy(parameter_servers=True)
    ll.TrainerConfig(validation_steps=5).validate_for_strategy(parameter_servers=True)
    eager = ll.TrainerConfig(validation_steps=5, train_tf_function=False,
                             train_tf_while_loop=False)
    eager.validate_for_strategy(parameter_servers=False)
    with pytest.raises(ll.ConfigError, match="needs trainer.train_tf_function=true"):
        eager.validate_for_strategy(parameter_servers=True, evaluates=False)
