"""Built-in experiments; importing this package registers them (`registry_imports` does).

- `digits_mlp`, `digits_cnn`: handwritten digits, offline, seconds on a CPU (`digits`).
- `mlp_tiny`, `cnn_small`, `mock`: the fixed-batch benchmark workloads (`workloads`).
- `image_classification`, `resnet_imagenet`, `mobilenet_imagenet`: TFM's vision family
  (`lite_launcher.vision`); `semantic_segmentation` and TFM's DeepLab / FPN segmentation
  experiments (`lite_launcher.vision.segmentation_configs`).
"""

from lite_launcher.experiments import digits  # noqa: F401  (registers digits_mlp, digits_cnn)
from lite_launcher.experiments import workloads  # noqa: F401  (registers mlp_tiny, cnn_small, mock)
# Registers image_classification, resnet_imagenet, mobilenet_imagenet and their task.
from lite_launcher.vision import configs as vision_configs, image_classification as vision_task  # noqa: F401,E501
# Registers TFM's eight semantic segmentation experiments and their task.
from lite_launcher.vision import segmentation_configs, semantic_segmentation  # noqa: F401
