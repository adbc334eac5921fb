"""The ViT backbone: TFM's parameter counts, options, position-embedding interpolation, the
three experiments' defaults, AdamW's decay, mixed precision and XLA."""

import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision import configs, modeling, vit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
with open(os.path.join(HERE, "data", "vit_tfm_numbers.json")) as f:
    TFM = json.load(f)

D, PATCH, MLP, HEADS, LAYERS = 16, 8, 32, 2, 2


def tiny_config(size=32, experiment="deit_imagenet_pretrain", **vit_overrides):
    """The experiment with a 2-block, 16-wide ViT (model_name null) and 10 classes."""
    config = ll.get_exp_config(experiment)
    config.task.model.override({
        "num_classes": 10, "input_size": [size, size, 3],
        "backbone": {"vit": {"model_name": None, "hidden_size": D, "patch_size": PATCH,
                             "representation_size": 0,
                             "transformer": {"mlp_dim": MLP, "num_heads": HEADS,
                                             "num_layers": LAYERS}, **vit_overrides}}})
    config.validate()
    return config


def tiny_model(size=32, **vit_overrides):
    return modeling.build_classification_model(tiny_config(size, **vit_overrides).task.model)


def counted(model_config):
    """(model, backbone) parameter counts, with variables never initialised (shapes only)."""
    with keras.StatelessScope(initialize_variables=False):
        model = modeling.build_classification_model(model_config)
        counts = model.count_params(), model.backbone.count_params()
    keras.backend.clear_session()  # drops Keras's list of the uninitialised variables
    return counts


def test_parameter_counts_of_tfms_14_vit_yamls_equal_tfms():
    assert len(TFM["models"]) == 14
    seen = {}
    for name, expected in TFM["models"].items():
        config = ll.get_exp_config(expected["experiment"])
        config.task.model.override(expected["model_override"])
        key = json.dumps(config.task.model.as_dict(), sort_keys=True)
        if key not in seen:
            seen[key] = counted(config.task.model)
        assert seen[key] == (expected["params"], expected["backbone_params"]), name
    assert len(seen) == 7  # Ti/S/B/L at 224 (DeiT), B/L/H at 384


def test_model_name_sets_the_sizes_as_tfms_builder():
    # TFM's ViT-H YAMLs say patch_size 16; the vit-h14 spec makes it 14 (27 x 27 patches).
    config = configs.VisionTransformer(model_name="vit-h14", patch_size=16, hidden_size=8)
    assert config.sizes() == dict(hidden_size=1280, patch_size=14, mlp_dim=5120, num_heads=16,
                                  num_layers=32)
    custom = configs.VisionTransformer(model_name=None, hidden_size=8, patch_size=4)
    assert (custom.sizes()["hidden_size"], custom.sizes()["patch_size"]) == (8, 4)


@pytest.mark.parametrize("name", sorted(TFM["tiny"]))
def test_the_network_and_its_options_count_as_tfm(name):
    # TFM's counts for the same tiny ViT (make_vit_tfm_numbers.py, "tiny").
    assert TFM["tiny_spec"] == {"hidden_size": D, "patch_size": PATCH, "transformer": {
        "mlp_dim": MLP, "num_heads": HEADS, "num_layers": LAYERS}}
    expected = TFM["tiny"][name]
    model = tiny_model(expected["size"], **expected["vit"])
    assert (model.count_params(), model.backbone.count_params()) == (
        expected["params"], expected["backbone_params"])


def test_endpoints_as_tfm():
    x = tf.random.uniform([2, 32, 32, 3])
    token = tiny_model(representation_size=24).backbone(x)
    assert {k: tuple(v.shape) for k, v in token.items()} == {"pre_logits": (2, 1, 1, 24)}
    pre = token["pre_logits"].numpy()
    assert np.all(np.abs(pre) <= 1.0)  # tanh
    maps = tiny_model(pooler="gap", output_2d_feature_maps=True).backbone(x)
    assert {k: tuple(v.shape) for k, v in maps.items()} == {
        "3": (2, 4, 4, D), "pre_logits": (2, 1, 1, D)}  # level round(log2(8))
    np.testing.assert_allclose(maps["pre_logits"].numpy()[:, 0, 0],
                               maps["3"].numpy().mean(axis=(1, 2)), atol=1e-5)
    none = tiny_model(pooler="none")
    assert {k: tuple(v.shape) for k, v in none.backbone(x).items()} == {
        "encoded_tokens": (2, 16, D)}
    assert none(x).shape == (2, 10)  # the head averages the tokens
    scores = tiny_model(output_attention_scores=True).backbone(x)
    assert tuple(scores["attention_scores"].shape) == (2, HEADS, 17, 17)
    np.testing.assert_allclose(scores["attention_scores"].numpy().sum(-1), 1.0, rtol=1e-5)
    assert tiny_model(output_attention_scores=True)(x).shape == (2, 10)  # head: pre_logits


def test_stochastic_depth_layer_scale_and_initializers_as_tfm():
    model = tiny_model(init_stochastic_depth_rate=0.3, layer_scale_init_value=0.5)
    blocks = [l for l in model.backbone.layers if isinstance(l, vit.TransformerEncoderBlock)]
    assert [b.drop_path.drop_rate for b in blocks] == pytest.approx([0.15, 0.3])  # rate * i / n
    assert np.all(blocks[0].layer_scale_mlp.gamma.numpy() == 0.5)
    patch = model.backbone.get_layer("patch_embedding")
    assert isinstance(patch.kernel_initializer, keras.initializers.HeUniform)  # original_init off
    assert isinstance(blocks[0].intermediate.kernel_initializer,
                      keras.initializers.TruncatedNormal)
    original = tiny_model(original_init=True, init_stochastic_depth_rate=0.0)
    block = next(l for l in original.backbone.layers
                 if isinstance(l, vit.TransformerEncoderBlock))
    assert isinstance(original.backbone.get_layer("patch_embedding").kernel_initializer,
                      keras.initializers.LecunNormal)
    assert isinstance(block.intermediate.kernel_initializer, keras.initializers.GlorotUniform)
    assert block.drop_path is None
    np.testing.assert_array_equal(original.backbone.get_layer("cls").cls.numpy(), 0.0)


@pytest.mark.parametrize("overrides, message", [
    ({"pooler": "cls"}, "pooler 'cls' must be one of token, gap, none"),
    ({"model_name": "vit-x9"}, "model_name 'vit-x9' is not one of"),
    ({"transformer_partition_dims": [1, 1, 2, 1]}, "transformer_partition_dims"),
    ({"init_stochastic_depth_rate": 1.5}, "init_stochastic_depth_rate (1.5)"),
    ({"hidden_size": 15}, "hidden_size 15 must be a multiple of transformer.num_heads 2"),
    ({"pos_embed_shape": [0, 4]}, "pos_embed_shape [0, 4]"),
])
def test_bad_vit_options_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError, match=None) as error:
        tiny_config(**overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_position_embedding_interpolation_matches_tfms():
    for case in TFM["interpolation"]:
        embedding = np.array(case["embedding"], np.float32)
        ours = vit.interpolate_position_embeddings(embedding, case["from_shape"],
                                                   case["to_shape"]).numpy()
        np.testing.assert_allclose(ours, np.array(case["tfm_result"]), rtol=1e-6, atol=1e-6)


def test_a_larger_input_interpolates_the_grid_and_keeps_the_class_token():
    small = tiny_model(32)  # 4 x 4 patches + the class token
    large = tiny_model(48, pos_embed_shape=[4, 4])  # 6 x 6 patches, 4 x 4 embedding grid
    small_emb = small.backbone.get_layer("posembed_input")
    large_emb = large.backbone.get_layer("posembed_input")
    assert tuple(large_emb.pos_embedding.shape) == tuple(small_emb.pos_embedding.shape) == (
        1, 17, D)
    large_emb.pos_embedding.assign(small_emb.pos_embedding)
    tokens = tf.zeros([1, 37, D])
    added = large_emb(tokens).numpy()
    table = small_emb.pos_embedding.numpy()
    np.testing.assert_array_equal(added[:, :1], table[:, :1])
    np.testing.assert_allclose(
        added[:, 1:], vit.interpolate_position_embeddings(table[:, 1:], (4, 4), (6, 6)),
        atol=1e-6)
    assert large(tf.zeros([2, 48, 48, 3])).shape == (2, 10)


def test_vit_experiments_have_tfms_defaults():
    steps_per_epoch = 1281167 // 4096
    deit = ll.get_exp_config("deit_imagenet_pretrain")
    backbone = deit.task.model.backbone
    assert backbone.type == "vit" and backbone.vit.model_name == "vit-b16"
    assert (backbone.vit.representation_size, backbone.vit.init_stochastic_depth_rate,
            backbone.vit.original_init) == (768, 0.1, False)
    assert deit.task.model.kernel_initializer == "zeros"
    assert (deit.task.losses.one_hot, deit.task.losses.soft_labels,
            deit.task.losses.label_smoothing) == (False, True, 0.1)
    train = deit.task.train_data
    assert train.aug_type.type == "randaug" and train.aug_type.randaug.magnitude == 9
    assert train.aug_type.randaug.exclude_ops == ["Cutout"]
    assert train.mixup_and_cutmix.label_smoothing == 0.1 and train.global_batch_size == 4096
    assert deit.trainer.train_steps == 300 * steps_per_epoch
    opt = deit.trainer.optimizer_config
    assert opt.optimizer.adamw.weight_decay_rate == 0.05
    assert opt.optimizer.adamw.gradient_clip_norm == 0.0
    assert opt.learning_rate.cosine.initial_learning_rate == pytest.approx(0.004)
    assert opt.warmup.linear.warmup_steps == 5 * steps_per_epoch
    pretrain = ll.get_exp_config("vit_imagenet_pretrain")
    assert pretrain.trainer.optimizer_config.optimizer.adamw.weight_decay_rate == 0.3
    assert pretrain.trainer.optimizer_config.warmup.linear.warmup_steps == 10000
    assert pretrain.task.train_data.aug_type is None
    finetune = ll.get_exp_config("vit_imagenet_finetune")
    assert finetune.task.model.input_size == [384, 384, 3]
    assert finetune.task.model.backbone.vit.representation_size == 0
    sgd = finetune.trainer.optimizer_config.optimizer
    assert (sgd.type, sgd.sgd.momentum, sgd.sgd.global_clipnorm) == ("sgd", 0.9, 1.0)
    assert finetune.trainer.train_steps == 20000
    assert finetune.task.train_data.global_batch_size == 512


def test_deit_adamw_decays_every_variable_and_does_not_clip_as_tfms():
    config = tiny_config()
    factory = ll.OptimizerFactory(config.trainer.optimizer_config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    assert isinstance(optimizer, keras.optimizers.AdamW) and optimizer.weight_decay == 0.05
    assert optimizer.global_clipnorm is None and optimizer.clipnorm is None
    model = tiny_model()
    # TFM's include list without an exclude list decays everything: biases, norms, cls, pos.
    assert all(optimizer._use_weight_decay(v) for v in model.trainable_variables)
    # A single exclude string is one regex.
    config.trainer.optimizer_config.optimizer.adamw.exclude_from_weight_decay = "bias|gamma"
    config.trainer.optimizer_config.optimizer.adamw.include_in_weight_decay = None
    factory = ll.OptimizerFactory(config.trainer.optimizer_config)
    optimizer = factory.build_optimizer(0.1)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert decayed and not any("bias" in p or "gamma" in p for p in decayed)
    assert any(p.endswith("kernel") for p in decayed)


def test_mixed_float16_keeps_norms_and_softmax_in_float32():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        config = tiny_config(transformer={"attention_dropout_rate": 0.1})
        model = modeling.build_classification_model(config.task.model)
        block = next(l for l in model.backbone.layers
                     if isinstance(l, vit.TransformerEncoderBlock))
        assert block.attention_norm.compute_dtype == "float32"
        assert block.attention.compute_dtype == "float16"
        logits = model(tf.random.uniform([2, 32, 32, 3]), training=True)
        assert logits.dtype == tf.float16 and np.isfinite(logits.numpy()).all()
        # The explicit (dropout) softmax path: float32 arithmetic, float16 result.
        scores = tf.constant(np.linspace(0, 11, 2 * 2 * 3 * 577).reshape(2, 2, 3, 577),
                             tf.float16)
        probs = block.attention._masked_softmax(scores)
        assert probs.dtype == tf.float16
        expected = tf.nn.softmax(tf.cast(scores, tf.float32)).numpy()
        np.testing.assert_allclose(probs.numpy().astype(np.float32), expected, rtol=1e-3,
                                   atol=1e-6)
        # (CPU kernels give the same numbers either way: the graph shows the float32 softmax.)
        graph = tf.function(block.attention._masked_softmax).get_concrete_function(
            tf.TensorSpec([2, 2, 3, 577], tf.float16)).graph
        softmax_types = [op.get_attr("T") for op in graph.get_operations()
                         if op.type == "Softmax"]
        assert softmax_types == [tf.float32]
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _tiny_vit_trainers(xla_runs, steps=2):
    """One Trainer per entry of `xla_runs` (runtime.enable_xla), same initial weights and data,
    each trained `steps` SGD steps; returns (trainers, initial weights)."""
    images = tf.random.stateless_uniform([4, 32, 32, 3], seed=[1, 2])
    labels = tf.one_hot([0, 1, 2, 3], 10)  # soft labels, as MixUp / CutMix give DeiT
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    trainers, initial = [], None
    for xla in xla_runs:
        # No random ops (dropout, drop path, stochastic depth): XLA draws other numbers.
        config = tiny_config(init_stochastic_depth_rate=0.0, transformer={"num_layers": 1})
        config.override({"runtime": {"enable_xla": xla}, "trainer": {
            "train_steps": steps, "optimizer_config": {
                "optimizer": {"type": "sgd"}, "warmup": {"type": None},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.5}}}}})
        config.task.model.kernel_initializer = "random_uniform"
        task = ll.get_task(config.task)
        model = task.build_model()
        if initial is None:
            initial = [w.numpy() for w in model.weights]
        else:
            model.set_weights(initial)
        optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        trainer = ll.Trainer(config, task, model, optimizer, evaluate=False,
                             train_dataset=dataset)
        trainer.train(tf.constant(steps))
        trainers.append(trainer)
    return trainers, initial


# ViT's step compiled whole (~11 s of CPU: XLA:CPU compiling a transformer's forward and
# backward pass); the suite compiles the same whole-step path on a small model.
@pytest.mark.release(sibling="tests/test_trainer.py::test_xla_matches_non_xla")
def test_xla_train_step_matches_non_xla(monkeypatch):
    import xla_checks  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import base_trainer as trainer_lib

    # The numerics need a compiled step: on a CPU-only machine lite would not compile ViT's
    # patch-embedding convolution (the rule test below), so the rule is lifted here.
    monkeypatch.setattr(trainer_lib, "_convnet_on_cpu_only", lambda model: False)
    (plain, compiled), initial = _tiny_vit_trainers((False, True))
    assert xla_checks.xla_compiled_calls(plain) == []
    assert any("train_step" in name for name in xla_checks.xla_compiled_calls(compiled))
    assert not np.allclose(plain.model.weights[0].numpy(), initial[0])
    for a, b in zip(plain.model.weights, compiled.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU") or
                         tf.config.list_logical_devices("TPU")), reason="CPU-only rule")
def test_enable_xla_leaves_vit_uncompiled_on_a_cpu_only_machine():
    import xla_checks  # pylint: disable=import-outside-toplevel

    # lite does not compile a step with convolution kernels on CPU (ViT's patch embedding
    # too; trainer._convnet_on_cpu_only, measured 0.17x on ResNet-18); the step still trains.
    (compiled,), initial = _tiny_vit_trainers((True,), steps=1)
    assert xla_checks.xla_compiled_calls(compiled) == []
    assert int(compiled.global_step.numpy()) == 1
    assert not np.allclose(compiled.model.weights[0].numpy(), initial[0])


def test_init_checkpoint_at_another_size_needs_the_pretraining_grid(tmp_path):
    pretrained = tiny_model(32)
    tf.train.Checkpoint(model=pretrained, **pretrained.checkpoint_items).save(
        str(tmp_path / "ckpt"))
    table = pretrained.backbone.get_layer("posembed_input").pos_embedding.numpy()
    for grid in (None, [4, 4]):
        config = tiny_config(48, experiment="vit_imagenet_finetune", pos_embed_shape=grid)
        config.task.override({"init_checkpoint": str(tmp_path),
                              "init_checkpoint_modules": "backbone"})
        task = ll.get_task(config.task)
        model = task.build_model()
        if grid is None:  # 6x6 patches + the class token: 37 embeddings, the checkpoint has 17
            with pytest.raises(ConfigError, match=r"set task.model.backbone.vit.pos_embed_shape"):
                task.initialize(model)
        else:
            task.initialize(model)
            np.testing.assert_array_equal(
                model.backbone.get_layer("posembed_input").pos_embedding.numpy(), table)


def test_backbone_round_trips_through_a_keras_file(tmp_path):
    backbone = tiny_model(layer_scale_init_value=0.1, output_attention_scores=True,
                          representation_size=8, pos_embed_shape=[2, 2]).backbone
    backbone.save(str(tmp_path / "vit.keras"))
    loaded = keras.models.load_model(str(tmp_path / "vit.keras"))
    x = tf.random.uniform([2, 32, 32, 3])
    ours, theirs = backbone(x), loaded(x)
    assert sorted(theirs) == ["attention_scores", "pre_logits"]
    for key in ours:
        np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), atol=1e-6)


@pytest.mark.parametrize("equation,output_shape,bias_axes,input_shape", [
    ("abc,cde->abde", (3, 4), "de", (2, 5, 6)),  # query / key / value
    ("abcd,cde->abe", (7,), "e", (2, 5, 3, 4)),  # the attention output
    ("abc,cd->abd", (7,), "d", (2, 5, 6)),
])
def test_matmul_einsum_dense_computes_what_einsum_dense_does(equation, output_shape, bias_axes,
                                                             input_shape):
    from lite_launcher.vision import layers
    keras.utils.set_random_seed(0)
    reference = keras.layers.EinsumDense(equation, output_shape=(None,) + output_shape,
                                         bias_axes=bias_axes, activation="relu")
    x = tf.constant(np.random.RandomState(0).randn(*input_shape).astype("float32"))
    reference.build(input_shape)
    reference.bias.assign(np.random.RandomState(1).randn(*reference.bias.shape))
    flat = layers.MatmulEinsumDense.from_config(reference.get_config())
    flat.build(input_shape)
    flat.set_weights(reference.get_weights())
    results = []
    for layer in (reference, flat):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            weights = tf.constant(np.random.RandomState(2).randn(*y.shape).astype("float32"))
            loss = tf.reduce_sum(y * weights)
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        results.append([y.numpy()] + [g.numpy() for g in grads])
    assert len(results[1]) == 4  # output, input gradient, kernel and bias gradients
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_flat_contracted_axes_accepts_only_a_trailing_contraction():
    from lite_launcher.vision.layers import flat_contracted_axes
    assert flat_contracted_axes("abc,cde->abde") == 1
    assert flat_contracted_axes("abcd,cde->abe") == 2
    assert flat_contracted_axes("abc,cd->abd") == 1
    assert flat_contracted_axes("ab,b->a") == 1  # a matrix times a vector is one too
    for other in ("abc,dce->abde", "abcd,aecd->acbe", "abc,cd->adb", "...b,bc->...c",
                  "abc,cc->abc", "abc,cde"):
        assert flat_contracted_axes(other) is None, other


def _broadcast_batch_matmuls(attention_cls):
    """BatchMatMulV2 ops of one attention layer's forward + gradient whose operands have
    different ranks: a kernel broadcast over the batch (its gradient then a per-example
    matmul summed over the batch)."""
    layer = attention_cls(num_heads=2, key_dim=8, output_shape=16)
    x = tf.ones((2, 5, 16))
    layer(x, x)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x, x))
        return tape.gradient(loss, layer.trainable_weights)

    ops_ = step.get_concrete_function(x).graph.get_operations()
    return [op for op in ops_ if op.type == "BatchMatMulV2"
            and op.inputs[0].shape.rank != op.inputs[1].shape.rank]


def test_vit_attention_projections_contract_as_one_matmul_as_tfms_einsum():
    """Keras 3 lowers MultiHeadAttention's projections to kernel-broadcasting batch matmuls;
    ViT's attention (as TF's Einsum under TFM) does one 2-D matmul: on ViT-Ti bf16 training
    this was the 10 % lite lost to TFM in benchmarks/step_vs_tfm.py."""
    from lite_launcher.vision import layers
    assert _broadcast_batch_matmuls(keras.layers.MultiHeadAttention)  # Keras's own lowering
    assert not _broadcast_batch_matmuls(vit.Float32SoftmaxAttention)
    block = vit.Float32SoftmaxAttention(num_heads=2, key_dim=8)
    block.build((2, 5, 16), (2, 5, 16))
    assert all(type(d) is layers.MatmulEinsumDense for d in (  # noqa: E721
        block.query_dense, block.key_dense, block.value_dense, block.output_dense))
