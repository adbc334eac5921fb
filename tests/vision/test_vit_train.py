"""End to end through `lite-train` (in this process): a DeiT YAML pretrains a tiny ViT at
32x32, a fine-tuning YAML restores its backbone at 48x48 (position embeddings interpolated)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

import lite_launcher as ll
from lite_launcher.vision import modeling

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from digits_images import digits_tfrecords  # noqa: E402
from test_modes import read_scalars  # noqa: E402
from cli import run_lite_train_in_process  # noqa: E402

DEIT_YAML = os.path.join(HERE, "data", "imagenet_vitti16_i224_deit_gpu.yaml")
FINETUNE_YAML = os.path.join(HERE, "data", "imagenet_vitti16_i384_finetune_gpu.yaml")
# A 1-block, 16-wide ViT with 8x8 patches (model_name null keeps these sizes).
TINY_VIT = {"model_name": None, "hidden_size": 16, "patch_size": 8,
            "transformer": {"mlp_dim": 32, "num_heads": 2, "num_layers": 1}}


def lite_train(*args):
    run = run_lite_train_in_process(*args)
    assert run.returncode == 0, run.stderr[-4000:]


@pytest.fixture(scope="module")
def small_records(tmp_path_factory):
    """(train glob, validation glob): 60 and 40 digits (every class) as 32x32 JPEG TFRecords."""
    return digits_tfrecords(str(tmp_path_factory.mktemp("vit_digits")), num_shards=1,
                            limits=(60, 40))


def cpu_overrides(train, validation, size, vit, **task):
    """What a CPU test run changes: no GPUs, float32, a tiny ViT and input, 2 + 1 steps."""
    return {
        "runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32"},
        "task": {"model": {"num_classes": 10, "input_size": [size, size, 3],
                           "backbone": {"vit": {**TINY_VIT, **vit}}},
                 "train_data": {"input_path": train, "global_batch_size": 4,
                                "dtype": "float32", "shuffle_buffer_size": 8},
                 "validation_data": {"input_path": validation, "global_batch_size": 4,
                                     "dtype": "float32"}, **task},
        "trainer": {"train_steps": 2, "steps_per_loop": 2, "summary_interval": 2,
                    "checkpoint_interval": 2, "validation_interval": 2,
                    "validation_steps": 1}}


def restored_pos_embedding(model_dir, size, **vit):
    """The position embedding of the latest checkpoint in `model_dir`, read into the model."""
    config = ll.get_exp_config("image_classification")
    config.task.model.override({"num_classes": 10, "input_size": [size, size, 3],
                                "backbone": {"type": "vit", "vit": {**TINY_VIT, **vit}}})
    model = modeling.build_classification_model(config.task.model)
    tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(str(model_dir))).expect_partial().assert_existing_objects_matched()
    return model.backbone.get_layer("posembed_input").pos_embedding.numpy()


def test_deit_pretrains_and_vit_finetune_restores_it_at_a_larger_size(small_records, tmp_path):
    train, validation = small_records
    pretrain_dir = tmp_path / "pretrain"
    overrides = cpu_overrides(train, validation, 32, {"representation_size": 0})
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump(overrides))
    lite_train("--experiment", "deit_imagenet_pretrain", "--config_file", DEIT_YAML,
               "--config_file", tmp_path / "pretrain.yaml", "--mode", "train_and_eval",
               "--model_dir", pretrain_dir)
    with open(pretrain_dir / "params.yaml") as f:
        params = yaml.safe_load(f)
    # From the YAML (RandAugment, MixUp / CutMix, AdamW) ...
    train_params = params["task"]["train_data"]
    assert train_params["aug_type"]["randaug"]["exclude_ops"] == ["Cutout"]
    assert train_params["mixup_and_cutmix"]["mixup_alpha"] == 0.8
    adamw = params["trainer"]["optimizer_config"]["optimizer"]["adamw"]
    assert (adamw["weight_decay_rate"], adamw["include_in_weight_decay"]) == (
        0.05, ".*(kernel|weight):0$")
    # ... and from deit_imagenet_pretrain's defaults.
    assert adamw["gradient_clip_norm"] == 0.0 and params["task"]["losses"]["soft_labels"]
    assert sorted(read_scalars(str(pretrain_dir / "train"))["training_loss"]) == [2]
    validation_scalars = read_scalars(str(pretrain_dir / "validation"))
    assert sorted(validation_scalars["accuracy"]) == [2]
    assert np.isfinite(validation_scalars["validation_loss"][2])
    pretrained = restored_pos_embedding(pretrain_dir, 32)
    assert pretrained.shape == (1, 1 + 4 * 4, 16)  # class token + the 4x4 patch grid

    # Fine-tuning at 48x48 (6x6 patches) from the 4x4 grid; a tiny rate keeps the restored
    # weights recognisable after 2 steps (random embeddings differ by ~0.03).
    finetune_dir = tmp_path / "finetune"
    overrides = cpu_overrides(train, validation, 48, {"pos_embed_shape": [4, 4]},
                              init_checkpoint=str(pretrain_dir))
    overrides["trainer"]["optimizer_config"] = {
        "learning_rate": {"cosine": {"initial_learning_rate": 1e-5}}}
    (tmp_path / "finetune.yaml").write_text(yaml.safe_dump(overrides))
    lite_train("--experiment", "vit_imagenet_finetune", "--config_file", FINETUNE_YAML,
               "--config_file", tmp_path / "finetune.yaml", "--mode", "train_and_eval",
               "--model_dir", finetune_dir)
    assert sorted(read_scalars(str(finetune_dir / "train"))["training_loss"]) == [2]
    assert sorted(read_scalars(str(finetune_dir / "validation"))["accuracy"]) == [2]
    finetuned = restored_pos_embedding(finetune_dir, 48, pos_embed_shape=[4, 4])
    assert finetuned.shape == pretrained.shape
    np.testing.assert_allclose(finetuned, pretrained, atol=1e-4)
    assert not np.array_equal(finetuned, pretrained)  # and it trained
