"""Users' weights survive refactors of the vision layers: for one small model of each family
the weights (path, shape, creation order) and the tf.train.Checkpoint keys equal those the
code before the shared-layers refactor made (data/vision_layout_reference.json), and `.keras`
files that code saved (data/legacy_keras/, ViT layers then under the Keras package
'lite_launcher.vit') load and give the outputs they gave."""

import json
import os
import sys

import keras
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vision_layout import MODELS, build, layout  # noqa: E402

DATA = os.path.join(HERE, "data")
with open(os.path.join(DATA, "vision_layout_reference.json")) as f:
    REFERENCE = json.load(f)


def test_the_reference_covers_every_family():
    assert sorted(REFERENCE) == sorted(MODELS)
    families = {override["backbone"].get("type") or next(iter(override["backbone"]))
                for _, override in MODELS.values()}
    assert families == {"resnet", "dilated_resnet", "mobilenet", "vit"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_weights_and_checkpoint_keys_are_unchanged(name, tmp_path):
    got = layout(build(name), str(tmp_path))
    keras.backend.clear_session()
    expected = REFERENCE[name]
    # Equal lists, compared so that a failure names the first differing weight or key.
    for kind in ("weights", "checkpoint"):
        for i, (ours, theirs) in enumerate(zip(got[kind], expected[kind])):
            assert ours == theirs, f"{name} {kind}[{i}]"
        assert len(got[kind]) == len(expected[kind]), f"{name} {kind}"


@pytest.mark.parametrize("name", ["vit", "convnet_blocks"])
def test_keras_files_saved_before_the_refactor_load(name):
    model = keras.models.load_model(os.path.join(DATA, "legacy_keras", f"{name}.keras"))
    saved = dict(np.load(os.path.join(DATA, "legacy_keras", f"{name}.npz")))
    outputs = model(saved.pop("input"), training=False)
    outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
    assert sorted(outputs) == sorted(saved)
    for key, expected in saved.items():
        np.testing.assert_allclose(np.asarray(outputs[key]), expected, rtol=1e-5, atol=1e-5,
                                   err_msg=key)
