"""TFM's image classification family on Keras 3: configs, TFRecord input, the backbones (one
module per family: `resnet`, `resnet_deeplab`, `mobilenet`, `vit`, registered with the factory
in `modeling`, built from the shared layers of `layers`), the task, and the experiments
`image_classification`, `resnet_imagenet`, `resnet_rs_imagenet`, `mobilenet_imagenet`,
`deit_imagenet_pretrain`, `vit_imagenet_pretrain` and `vit_imagenet_finetune`.

The experiments and the task are registered with the built-ins (`lite_launcher.experiments`
imports `configs` and `image_classification`). This package imports nothing itself, so that
`python -m lite_launcher.vision.make_tfrecords` starts without TensorFlow until it is needed.
"""
