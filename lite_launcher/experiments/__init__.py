"""Built-in experiments; importing this package registers them (`registry_imports` does).

- `digits_mlp`, `digits_cnn`: handwritten digits, offline, seconds on a CPU (`digits`).
- `mlp_tiny`, `cnn_small`, `mock`: the fixed-batch benchmark workloads (`workloads`).
- `image_classification`, `resnet_imagenet`, `resnet_rs_imagenet`, `mobilenet_imagenet`,
  `deit_imagenet_pretrain`, `vit_imagenet_pretrain`, `vit_imagenet_finetune`: TFM's image
  classification experiments (`lite_launcher.vision.configs`).
"""

from lite_launcher.experiments import digits  # noqa: F401  (registers digits_mlp, digits_cnn)
from lite_launcher.experiments import workloads  # noqa: F401  (registers mlp_tiny, cnn_small, mock)
# Registers the seven image classification experiments and their task.
from lite_launcher.vision import configs as vision_configs, image_classification as vision_task  # noqa: F401,E501
