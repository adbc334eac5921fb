"""Writes tfm_2_20_config_defaults.json: the field names and defaults of TFM 2.20's configs.

Run once against the unpacked tf-models-official 2.20 source (it is parsed, not imported, so
neither TensorFlow nor tf_keras is needed), e.g. the installed wheel:

    python tests/data/make_tfm_defaults_snapshot.py /work/tfm_venv/lib/python3.11/site-packages

The vision configs (common, backbones, image_classification) are keyed "<module>.<Class>".

Each class maps to {"bases": [...], "fields": {name: default}}; a default is the literal value,
{"factory": "ClassName"} for `dataclasses.field(default_factory=ClassName)`, or
{"expr": "source"} for anything else.
"""

import ast
import json
import os
import sys

FILES = (
    "official/core/config_definitions.py",
    "official/modeling/optimization/configs/optimizer_config.py",
    "official/modeling/optimization/configs/learning_rate_config.py",
    "official/modeling/optimization/configs/optimization_config.py",
)
# Vision configs, keyed "<module>.<Class>" (their DataConfig is not core's).
VISION_FILES = (
    "official/vision/configs/common.py",
    "official/vision/configs/backbones.py",
    "official/vision/configs/image_classification.py",
)


def _default(node):
    if node is None:
        return {"expr": "<required>"}
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if all(isinstance(n, (ast.BinOp, ast.Constant, ast.operator)) for n in ast.walk(node)):
        return eval(compile(ast.Expression(node), "<default>", "eval"), {})  # constants only
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg == "default_factory":
                return {"factory": ast.unparse(keyword.value).split(".")[-1]}
            if keyword.arg == "default":
                return _default(keyword.value)
    return {"expr": ast.unparse(node)}


def snapshot(root):
    out = {}
    for relative in FILES + VISION_FILES:
        tree = ast.parse(open(os.path.join(root, relative)).read())
        prefix = ""
        if relative in VISION_FILES:
            prefix = os.path.splitext(os.path.basename(relative))[0] + "."
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            fields = {stmt.target.id: _default(stmt.value) for stmt in node.body
                      if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)}
            out[prefix + node.name] = {"file": relative,
                              "bases": [ast.unparse(b).split(".")[-1] for b in node.bases],
                              "fields": fields}
    return out


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tfm"
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "tfm_2_20_config_defaults.json")
    with open(target, "w") as f:
        json.dump(snapshot(root), f, indent=1, sort_keys=True)
        f.write("\n")
    print(target)
