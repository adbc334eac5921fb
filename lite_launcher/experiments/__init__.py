"""Built-in experiments; `lite_launcher.registry_imports` registers them all.

Importing this package registers the digits and workload experiments only; the vision families
register when their modules are imported (`registry_imports` imports them; the driver only the
family its `--experiment` needs, `builtin_experiments.modules_for`: issue 31).

- `digits_mlp`, `digits_cnn`: handwritten digits, offline, seconds on a CPU (`digits`).
- `mlp_tiny`, `cnn_small`, `mock`: the fixed-batch benchmark workloads (`workloads`).
- `image_classification`, `resnet_imagenet`, `resnet_rs_imagenet`, `mobilenet_imagenet`,
  `deit_imagenet_pretrain`, `vit_imagenet_pretrain`, `vit_imagenet_finetune`: TFM's image
  classification experiments (`lite_launcher.vision.configs.image_classification`).
- `semantic_segmentation`, `seg_deeplabv3_pascal`, `seg_deeplabv3plus_pascal`,
  `seg_resnetfpn_pascal`, `mnv2_deeplabv3_pascal`, `seg_deeplabv3plus_cityscapes`,
  `mnv2_deeplabv3_cityscapes`, `mnv2_deeplabv3plus_cityscapes`: TFM's semantic segmentation
  experiments (`lite_launcher.vision.configs.semantic_segmentation`).
- `retinanet`, `retinanet_resnetfpn_coco`, `retinanet_spinenet_coco`, `retinanet_mobile_coco`:
  TFM's RetinaNet (object detection) experiments (`lite_launcher.vision.configs.retinanet`).
"""

from lite_launcher.experiments import digits  # noqa: F401  (registers digits_mlp, digits_cnn)
from lite_launcher.experiments import workloads  # noqa: F401  (registers mlp_tiny, cnn_small, mock)
