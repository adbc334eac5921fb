"""Registers the built-in experiments and tasks on import, as TFM's `registry_imports`.

The driver imports it before parsing flags; the top-level `ll.get_exp_config`, `ll.get_task`
and `ll.registered_experiments` are the registry's lookups taken from here, so they find the
built-ins. The built-ins: `digits_mlp`, `digits_cnn`, `mlp_tiny`, `cnn_small`, `mock`
(`lite_launcher.experiments`) and `image_classification`, `resnet_imagenet`,
`resnet_rs_imagenet`, `mobilenet_imagenet`, `deit_imagenet_pretrain`, `vit_imagenet_pretrain`,
`vit_imagenet_finetune`, and TFM's eight semantic segmentation experiments
(`semantic_segmentation`, `seg_deeplabv3_pascal`, ...) and TFM's four RetinaNet experiments
(`retinanet`, `retinanet_resnetfpn_coco`, `retinanet_spinenet_coco`, `retinanet_mobile_coco`)
(`lite_launcher.vision`).
"""

import lite_launcher.experiments  # noqa: F401  (registers digits and the workloads)
# Registers the seven image classification experiments and their task.
import lite_launcher.vision.configs.image_classification  # noqa: F401
import lite_launcher.vision.tasks.image_classification  # noqa: F401
# Registers TFM's eight semantic segmentation experiments and their task.
import lite_launcher.vision.configs.semantic_segmentation  # noqa: F401
import lite_launcher.vision.tasks.semantic_segmentation  # noqa: F401
# Registers TFM's four RetinaNet experiments and their task.
import lite_launcher.vision.configs.retinanet  # noqa: F401
import lite_launcher.vision.tasks.retinanet  # noqa: F401
from lite_launcher.registry import (  # noqa: F401  (the lookups, built-ins loaded)
    get_exp_config, get_task, get_task_cls, registered_experiments)
