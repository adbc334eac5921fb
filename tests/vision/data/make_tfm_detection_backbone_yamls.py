"""Writes tfm_detection_backbone_yamls.json: what TFM 2.20's loader makes of its RetinaNet YAMLs
on SpineNet, mobile SpineNet and MobileDet (the `.yaml` files of this folder, as
tensorflow/models ships them): each one's task, trainer and runtime (`as_dict()`) after
`override_params_dict` on the experiment its first line names. Run in TFM's venv:

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_detection_backbone_yamls.py

`coco_mobiledetcpu_tpu.yaml` reads `input_size: [320 320, 3]` (YAML: ['320 320', 3], which TFM
keeps without a word); its entry `coco_mobiledetcpu_tpu.yaml (corrected)` is the file with
`CORRECTION` applied, the file the test loads after lite refused the original.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# YAML -> the experiment its first line names (coco_spinenet190_tpu.yaml names none: TFM's
# SpineNet experiment).
YAMLS = {
    "coco_spinenet49_gpu_multiworker_mirrored.yaml": "retinanet_spinenet_coco",
    "coco_spinenet96_gpu_multiworker_mirrored.yaml": "retinanet_spinenet_coco",
    "coco_spinenet143_gpu_multiworker_mirrored.yaml": "retinanet_spinenet_coco",
    "coco_spinenet190_tpu.yaml": "retinanet_spinenet_coco",
    "coco_spinenet49_mobile_tpu.yaml": "retinanet_mobile_coco",
    "coco_spinenet49s_mobile_tpu.yaml": "retinanet_mobile_coco",
    "coco_spinenet49xs_mobile_tpu.yaml": "retinanet_mobile_coco",
    "coco_mobiledetcpu_tpu.yaml": "retinanet_mobile_coco",
}
CORRECTION = ("input_size: [320 320, 3]", "input_size: [320, 320, 3]")


def corrected_text(name):
    """The YAML's text with `CORRECTION` applied (unchanged for the other files)."""
    with open(os.path.join(HERE, name)) as f:
        return f.read().replace(*CORRECTION)


def main():
    import yaml  # pylint: disable=import-outside-toplevel
    from official.core import exp_factory  # pylint: disable=import-outside-toplevel
    from official.modeling import hyperparams  # pylint: disable=import-outside-toplevel
    from official.vision import registry_imports  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import

    out = {"tfm_version": "2.20", "yamls": {}}
    for name, experiment in YAMLS.items():
        sources = {name: os.path.join(HERE, name)}
        if name == "coco_mobiledetcpu_tpu.yaml":
            sources[name + " (corrected)"] = yaml.safe_load(corrected_text(name))
        for key, source in sources.items():
            config = hyperparams.override_params_dict(exp_factory.get_exp_config(experiment),
                                                      source, is_strict=True)
            config.validate()
            out["yamls"][key] = {"experiment": experiment, "task": config.task.as_dict(),
                                 "trainer": config.trainer.as_dict(),
                                 "runtime": config.runtime.as_dict()}
            print(key, config.task.model.backbone.type, config.task.model.input_size)
    path = os.path.join(HERE, "tfm_detection_backbone_yamls.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=list)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
