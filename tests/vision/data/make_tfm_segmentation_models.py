"""Writes tfm_2_20_segmentation_models.json: TFM 2.20's numbers for its semantic segmentation
experiments (official/vision/configs/semantic_segmentation.py in tensorflow/models).

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_segmentation_models.py

For each experiment: `config` (the experiment's task and trainer as TFM's `as_dict()`), and
for each one with a model to build (all but the general `semantic_segmentation`, which has
no classes), what TFM's task `build_model` makes of the experiment's own model config:
`params` (all weights), `trainable_params`, the weights of each `checkpoint_items` part
(`backbone`, `decoder`, `head`), `l2_terms` (len(model.losses)) and `logits_shape` at
`logits_input` (a symbolic call: no image is computed).
"""

import json
import os

import tensorflow as tf
import tf_keras
from official.core import exp_factory, task_factory
from official.vision import registry_imports  # noqa: F401  (registers the experiments)

EXPERIMENTS = ["semantic_segmentation", "seg_deeplabv3_pascal", "seg_deeplabv3plus_pascal",
               "seg_resnetfpn_pascal", "mnv2_deeplabv3_pascal", "seg_deeplabv3plus_cityscapes",
               "mnv2_deeplabv3_cityscapes", "mnv2_deeplabv3plus_cityscapes"]
# [height, width] of the symbolic input for the logits shape: the experiments' own training
# sizes (Cityscapes trains on 512x1024 crops; its ASPP pools 512x1024 / 16 = 32x64 windows).
LOGITS_INPUT = {"pascal": [512, 512], "cityscapes": [512, 1024]}


def count(weights):
    return int(sum(tf.size(w).numpy() for w in weights))


def main():
    out = {"tfm_version": "2.20", "experiments": {}}
    for name in EXPERIMENTS:
        config = exp_factory.get_exp_config(name)
        entry = {"config": {"task": config.task.as_dict(), "trainer": config.trainer.as_dict()}}
        if config.task.model.num_classes:
            task = task_factory.get_task(config.task)
            model = task.build_model()
            size = LOGITS_INPUT["cityscapes" if "cityscapes" in name else "pascal"]
            outputs = model(tf_keras.Input(shape=size + [3], batch_size=2), training=False)
            entry.update(
                params=count(model.weights),
                trainable_params=count(model.trainable_weights),
                parts={key: count(item.weights)
                       for key, item in sorted(model.checkpoint_items.items())},
                l2_terms=len(model.losses),
                logits_input=size,
                logits_shape=[int(d) for d in outputs["logits"].shape])
            print(name, entry["params"], entry["parts"], entry["logits_shape"], flush=True)
        out["experiments"][name] = entry
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tfm_2_20_segmentation_models.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=list)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
