"""The old flat `lite_launcher.vision.<module>` names still import after the move into TFM's
vision tree: each is the new module itself, and the old `configs` / `modeling` / `serving`
modules' names resolve through their packages."""

import importlib
import subprocess
import sys

import pytest

from lite_launcher import legacy

ROOT_NAME = "lite_launcher.vision"
# The old vision names (`legacy.MOVED`), relative to lite_launcher.vision.
VISION_MOVED = {old[len(ROOT_NAME) + 1:]: new[len(ROOT_NAME) + 1:]
                for old, new in legacy.MOVED.items() if old.startswith(ROOT_NAME + ".")}


@pytest.mark.parametrize("old, new", sorted(VISION_MOVED.items()))
def test_an_old_module_name_is_the_new_module(old, new):
    module = importlib.import_module(f"{ROOT_NAME}.{new}")
    assert importlib.import_module(f"{ROOT_NAME}.{old}") is module
    assert module.__name__ == f"{ROOT_NAME}.{new}"  # the new module keeps its own name
    from_import = getattr(__import__(ROOT_NAME, fromlist=[old]), old)
    assert from_import is module


def test_the_old_packages_serve_the_old_modules_names():
    from lite_launcher.vision import configs, modeling, serving
    from lite_launcher.vision.configs import backbones, image_classification
    from lite_launcher.vision.modeling import classification_model
    from lite_launcher.vision.modeling.backbones import factory
    from lite_launcher.vision.modeling.layers import nn_layers
    from lite_launcher.vision.serving import image_classification as classification_serving

    assert configs.ResNet is backbones.ResNet
    assert configs.resnet_imagenet is image_classification.resnet_imagenet
    assert modeling.build_classification_model is classification_model.build_classification_model
    assert modeling.register_backbone_builder is factory.register_backbone_builder
    assert modeling.NormSettings is nn_layers.NormSettings
    assert serving.build_serving_fn is classification_serving.build_serving_fn
    assert serving.INPUT_TYPES == ("image_tensor", "image_bytes", "tf_example",
                                   "serve_examples", "tflite")
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        configs.nothing_here  # pylint: disable=pointless-statement


def test_the_shared_configs_import_no_family_and_no_tensorflow():
    # What a new family's config (e.g. RetinaNet's) builds on.
    code = ("import sys\n"
            "from lite_launcher.vision.configs import backbones, common, decoders\n"
            "print(sorted(m for m in sys.modules if m.startswith('lite_launcher.vision')"
            " or m in ('tensorflow', 'keras')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert result.stdout.split() == [
        "['lite_launcher.vision',", "'lite_launcher.vision.configs',",
        "'lite_launcher.vision.configs.backbones',", "'lite_launcher.vision.configs.common',",
        "'lite_launcher.vision.configs.decoders']"]
