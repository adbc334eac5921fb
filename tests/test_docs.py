"""The manual: a short front page that links every docs/ page, and every experiment documented."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_readme_is_a_front_page():
    assert len(_read(os.path.join(ROOT, "README.md")).splitlines()) <= 250


def test_every_docs_page_is_linked_from_the_readme():
    links = set(re.findall(r"\]\((docs/[^)#]+\.md)", _read(os.path.join(ROOT, "README.md"))))
    pages = {f"docs/{name}" for name in os.listdir(DOCS) if name.endswith(".md")}
    assert pages, "docs/ holds no page"
    assert pages <= links, f"not linked from README.md: {sorted(pages - links)}"
    assert links <= pages, f"README.md links missing pages: {sorted(links - pages)}"


def test_every_listed_experiment_is_named_in_the_docs():
    # The built-ins' static table (tests/test_registry.py pins it to what the modules
    # register); the live registry also holds what other tests registered in this process.
    from lite_launcher.common.builtin_experiments import BUILTIN_EXPERIMENTS

    text = _read(os.path.join(ROOT, "README.md")) + "".join(
        _read(os.path.join(DOCS, name)) for name in os.listdir(DOCS) if name.endswith(".md"))
    named = set(re.findall(r"`([A-Za-z0-9_.]+)`", text))
    experiments = sorted(BUILTIN_EXPERIMENTS)
    assert "digits_mlp" in experiments
    missing = [name for name in experiments if name not in named]
    assert not missing, f"experiments not named in README.md or docs/: {missing}"


def test_the_readmes_tfm_snippet_runs_as_written(tmp_path):
    # The six lines under "TFM's Colab lines on lite", model_dir moved into tmp_path.
    readme = _read(os.path.join(ROOT, "README.md"))
    section = readme.split("## TFM's Colab lines on lite", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) == 6
    assert "/tmp/digits_tfm" in code
    namespace = {}
    exec(code.replace("/tmp/digits_tfm", str(tmp_path / "model")), namespace)  # pylint: disable=exec-used
    assert namespace["eval_logs"]["accuracy"] > 0.8
    assert os.path.exists(tmp_path / "model" / "checkpoint")
