"""TFM's image classification family on Keras 3: configs, TFRecord input, ResNet / MobileNet
backbones, the task, and the experiments `image_classification`, `resnet_imagenet` and
`mobilenet_imagenet` (registered when this package is imported).

`python -m lite_launcher.vision.make_tfrecords` turns a folder of images into TFRecords.
"""

from lite_launcher.vision import configs  # noqa: F401  (registers the experiments)
from lite_launcher.vision import image_classification  # noqa: F401  (registers the task)
