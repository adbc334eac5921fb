"""The names of the built-in experiments, known without importing them (TensorFlow-free).

Importing an experiment's module registers it, and most of those modules import Keras and
TensorFlow (seconds). The driver checks `--experiment` against these names and the ones
registered so far, so a wrong name is refused before TensorFlow loads; the modules themselves
are imported by `lite_launcher.common.registry_imports`. `tests/test_registry.py` checks that this
table names exactly the experiments those modules register.
"""

from typing import Dict, List, Optional

# Experiment name -> the module that registers it.
BUILTIN_EXPERIMENTS: Dict[str, str] = {
    "digits_mlp": "lite_launcher.experiments.digits",
    "digits_cnn": "lite_launcher.experiments.digits",
    "mlp_tiny": "lite_launcher.experiments.workloads",
    "cnn_small": "lite_launcher.experiments.workloads",
    "mock": "lite_launcher.experiments.workloads",
    "image_classification": "lite_launcher.vision.configs.image_classification",
    "resnet_imagenet": "lite_launcher.vision.configs.image_classification",
    "resnet_rs_imagenet": "lite_launcher.vision.configs.image_classification",
    "mobilenet_imagenet": "lite_launcher.vision.configs.image_classification",
    "deit_imagenet_pretrain": "lite_launcher.vision.configs.image_classification",
    "vit_imagenet_pretrain": "lite_launcher.vision.configs.image_classification",
    "vit_imagenet_finetune": "lite_launcher.vision.configs.image_classification",
    "semantic_segmentation": "lite_launcher.vision.configs.semantic_segmentation",
    "seg_deeplabv3_pascal": "lite_launcher.vision.configs.semantic_segmentation",
    "seg_deeplabv3plus_pascal": "lite_launcher.vision.configs.semantic_segmentation",
    "seg_resnetfpn_pascal": "lite_launcher.vision.configs.semantic_segmentation",
    "mnv2_deeplabv3_pascal": "lite_launcher.vision.configs.semantic_segmentation",
    "seg_deeplabv3plus_cityscapes": "lite_launcher.vision.configs.semantic_segmentation",
    "mnv2_deeplabv3_cityscapes": "lite_launcher.vision.configs.semantic_segmentation",
    "mnv2_deeplabv3plus_cityscapes": "lite_launcher.vision.configs.semantic_segmentation",
    "retinanet": "lite_launcher.vision.configs.retinanet",
    "retinanet_resnetfpn_coco": "lite_launcher.vision.configs.retinanet",
    "retinanet_spinenet_coco": "lite_launcher.vision.configs.retinanet",
    "retinanet_mobile_coco": "lite_launcher.vision.configs.retinanet",
    "fasterrcnn_resnetfpn_coco": "lite_launcher.vision.configs.maskrcnn",
    "maskrcnn_resnetfpn_coco": "lite_launcher.vision.configs.maskrcnn",
    "maskrcnn_spinenet_coco": "lite_launcher.vision.configs.maskrcnn",
    "cascadercnn_spinenet_coco": "lite_launcher.vision.configs.maskrcnn",
    "maskrcnn_mobilenet_coco": "lite_launcher.vision.configs.maskrcnn",
}

# The module registering the task of a module's experiments, where it is another module.
TASK_MODULES: Dict[str, str] = {
    "lite_launcher.vision.configs.image_classification":
        "lite_launcher.vision.tasks.image_classification",
    "lite_launcher.vision.configs.semantic_segmentation":
        "lite_launcher.vision.tasks.semantic_segmentation",
    "lite_launcher.vision.configs.retinanet": "lite_launcher.vision.tasks.retinanet",
    "lite_launcher.vision.configs.maskrcnn": "lite_launcher.vision.tasks.maskrcnn",
}


def modules_for(name: str) -> Optional[List[str]]:
    """The modules that register built-in experiment `name` and its task, in import order;
    None when `name` is not a built-in."""
    module = BUILTIN_EXPERIMENTS.get(name)
    if module is None:
        return None
    return [module] + ([TASK_MODULES[module]] if module in TASK_MODULES else [])


def registering_modules() -> List[str]:
    """Every module that registers a built-in experiment or task, each once, in import
    order (an experiment module before its task's)."""
    ordered: List[str] = []
    for name in BUILTIN_EXPERIMENTS:
        for module in modules_for(name):
            if module not in ordered:
                ordered.append(module)
    return ordered
