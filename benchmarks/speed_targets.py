"""Issue 55's speed targets, each judged from its committed results file: one table.

Every row names a target (lite/TFM speed, or lite's share of TFM's time or memory), the
results file that measures it, and how to read the figure from that file. `render()` writes
the markdown block `report.py --targets --update docs/benchmarks.md` puts between the
`<!-- speed-targets:start -->` / `<!-- speed-targets:end -->` lines; `report.py --check`
(doc_figures) renders it again and fails on any difference. Each row carries what its run
was measured on: the CPU model, the load average over its rounds and the commit.

A ratio is computed within each round, then median [min–max] over the rounds; the target is
judged on the median and a miss is printed as a MISS. Standard library only (with `rounds.py`'s
spread and
`inner_loop.py`'s pairing of its rounds).
"""

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import rounds as rounds_lib  # noqa: E402  (the one median [min-max] of per-round ratios)
RESULTS = os.path.join(_HERE, "results")
START_MARKER = "<!-- speed-targets:start -->"
END_MARKER = "<!-- speed-targets:end -->"


def _load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


def _loads(rounds):
    values = [r["loadavg"][0] for r in rounds if r.get("loadavg")]
    return (min(values), max(values)) if values else None


def step_vs_tfm_row(data, model, loop, dtype="float32"):
    """lite/TFM images per second of a `step_vs_tfm.py` row (TFM's ms over lite's, each
    round), the rounds lite was faster in, the record's machine."""
    record = next(r for r in data["records"]
                  if r["model"] == model and r["dtype"] == dtype and r.get("rounds"))
    rounds = [r for r in record["rounds"] if loop in r["ms_per_step"]["lite"]]
    ratios = [r["ms_per_step"]["tfm"][loop] / r["ms_per_step"]["lite"][loop] for r in rounds]
    return {"ratios": ratios, "wins": sum(v > 1.0 for v in ratios),
            "cpu": record.get("cpu_model"), "load": _loads(rounds)}


def nms_ab_row(data, above):
    """lite/TFM calls per second of `nms_ab.py`'s regime `above`."""
    record = next(r for r in data["records"] if r["above"] == above)
    ratios = [r["ms_per_step"]["tfm"]["generator"] / r["ms_per_step"]["lite"]["generator"]
              for r in record["rounds"]]
    return {"ratios": ratios, "wins": sum(v > 1.0 for v in ratios),
            "cpu": record.get("cpu_model"), "load": _loads(record["rounds"])}


def detection_input_row(data, label, measure="images_per_sec"):
    """lite/TFM of a `detection_input.py` row: images per second (wall), or, with
    `measure="cpu_ms_per_image"`, TFM's process CPU per image over lite's."""
    rounds = data["rows"][label]["rounds"]
    if measure == "images_per_sec":
        ratios = [r[measure]["lite"] / r[measure]["tfm"] for r in rounds]
    else:
        ratios = [r[measure]["tfm"] / r[measure]["lite"] for r in rounds]
    return {"ratios": ratios, "wins": sum(v > 1.0 for v in ratios), "cpu": data.get("cpu_model"),
            "load": _loads(rounds)}


def first_step_row(data, model, measure="first_step_s"):
    """lite's share of TFM's `measure` (time to first step, process CPU or peak RSS) of a
    `first_step.py` row, per round; "ahead" counts rounds where lite's share is below 1."""
    by_round = {}
    for r in data["records"]:
        if r["model"] == model and r.get("rc") == 0 and r.get(measure) is not None:
            by_round.setdefault(r["round"], {})[r["side"]] = r
    pairs = [sides for _, sides in sorted(by_round.items()) if {"lite", "tfm"} <= set(sides)]
    ratios = [sides["lite"][measure] / sides["tfm"][measure] for sides in pairs]
    loads = [sides[side]["loadavg_1m_before"] for sides in pairs for side in ("lite", "tfm")]
    return {"ratios": ratios, "wins": sum(v < 1.0 for v in ratios),
            "cpu": pairs[0]["lite"].get("cpu_model") if pairs else None,
            "load": (min(loads), max(loads)) if loads else None}


def inner_loop_row(data):
    """lite/raw loops per second of an `inner_loop.py` file: each round's paired ratio (each
    lite loop against the raw calls just before and after it)."""
    import inner_loop  # pylint: disable=import-outside-toplevel

    ratios = [inner_loop.paired_ratios(r)["paired"] for r in data["records"]]
    return {"ratios": ratios, "wins": sum(v > 1.0 for v in ratios),
            "cpu": data.get("machine_before", {}).get("cpu_model"),
            "load": _loads(data["records"])}


# (what, comparison, threshold, results file, reader, its arguments). Speeds are lite/TFM
# (>= target); times and memory lite's share of TFM's (<= target).
TARGETS = [
    ("detection eval with NMS and COCO update, RetinaNet R50-FPN 256², initialised model",
     ">=", 1.2,
     "2026-12-06-04297a2-step-vs-tfm-retinanet_resnet50_fpn-honest-eval-per-row-nms.json",
     step_vs_tfm_row, ("retinanet_resnet50_fpn", "eval")),
    ("detection eval with NMS and COCO update, RetinaNet MobileNetV2-FPN 256², initialised "
     "model", ">=", 1.2,
     "2026-12-06-04297a2-step-vs-tfm-retinanet_mobilenetv2_fpn-honest-eval-per-row-nms.json",
     step_vs_tfm_row, ("retinanet_mobilenetv2_fpn", "eval")),
    ("detection eval with NMS, masks and COCO update, Mask R-CNN R50-FPN 256²",
     ">=", 1.2,
     "2026-12-06-04297a2-step-vs-tfm-maskrcnn_resnet50_fpn-honest-eval-per-row-nms.json",
     step_vs_tfm_row, ("maskrcnn_resnet50_fpn", "eval")),
    *[(f"RetinaNet detection generator alone (decoding + NMS v2), 2 × 12,276 anchors × 90 "
       f"classes, {what}", ">=", 1.2, "2026-12-06-90a1028-nms-ab.json", nms_ab_row, (above,))
      for above, what in ((0.0, "no score above 0.05 (an initialised model)"),
                          (0.001, "1,122 scores above 0.05 an image (a trained model's order)"),
                          (0.01, "11,044 scores above 0.05 an image"))],
    ("Mask R-CNN R50-FPN training 256², float32", ">=", 1.1,
     "2026-12-06-6e23ac0-step-vs-tfm-maskrcnn-amx-roialign-2.json", step_vs_tfm_row,
     ("maskrcnn_resnet50_fpn", "train")),
    ("RetinaNet R50-FPN training 256², float32", ">=", 1.05,
     "2026-12-06-77e2a9d-step-vs-tfm-retinanet-focal-2.json", step_vs_tfm_row,
     ("retinanet_resnet50_fpn", "train")),
    ("RetinaNet MobileNetV2-FPN training 256², float32", ">=", 1.05,
     "2026-12-06-77e2a9d-step-vs-tfm-retinanet-focal-2.json", step_vs_tfm_row,
     ("retinanet_mobilenetv2_fpn", "train")),
    # The two ResNet-50 training rows again on the other CPU kind (AMD EPYC, AVX2), training
    # only: the rows above are the Intel Xeon's (AMX).
    ("Mask R-CNN R50-FPN training 256², float32", ">=", 1.1,
     "2026-12-06-8e26db7-step-vs-tfm-maskrcnn-train-amd.json", step_vs_tfm_row,
     ("maskrcnn_resnet50_fpn", "train")),
    ("RetinaNet R50-FPN training 256², float32", ">=", 1.05,
     "2026-12-06-f2669b8-step-vs-tfm-detection-train-amd.json", step_vs_tfm_row,
     ("retinanet_resnet50_fpn", "train")),
    *[(f"detection input alone ({title}: decode + parser, batch 2, no model), images/s",
       ">=", 1.3, "2026-12-06-4c727e8-detection-input.json", detection_input_row, (label,))
      for label, title in (
          ("retinanet_resnet50_fpn train", "RetinaNet R50-FPN training"),
          ("retinanet_resnet50_fpn eval", "RetinaNet R50-FPN evaluation"),
          ("maskrcnn_resnet50_fpn train", "Mask R-CNN R50-FPN training"),
          ("maskrcnn_resnet50_fpn eval", "Mask R-CNN R50-FPN evaluation"))],
    *[(f"{what}, {title} (lite-train vs TFM's train.py, whole process)", "<=", goal,
       "2026-12-06-8501b9c-first-step-quieter.json", first_step_row, (model, measure))
      for model, title, first_goal in (("resnet50", "ResNet-50 64², batch 16", 0.40),
                                       ("retinanet_resnet50_fpn", "RetinaNet R50-FPN 256², "
                                        "batch 2", 0.50))
      for what, measure, goal in (("time to first step", "first_step_s", first_goal),
                                  ("peak resident memory", "peak_rss_mb", 0.9))],
    ("inner loop, `mlp_tiny` at steps_per_loop=100, lite/raw `tf.function` loop (lite/raw, "
     "not lite/TFM), TF 2.21", ">=", 0.97, "2026-12-06-9438a04-inner-loop.json",
     inner_loop_row, ()),
    ("inner loop, as above, TF 2.20", ">=", 0.97, "2026-12-06-47c4883-inner-loop-tf220.json",
     inner_loop_row, ()),
]


def rows(targets=None):
    """Each target's figures: (what, comparison, threshold, file, commit, summary, verdict)."""
    out = []
    for what, comparison, threshold, name, reader, args in targets or TARGETS:
        data = _load(name)
        figures = reader(data, *args)
        summary = rounds_lib.spread(figures["ratios"])
        met = (summary["median"] >= threshold if comparison == ">="
               else summary["median"] <= threshold)
        out.append((what, comparison, threshold, name, data.get("commit", "?"),
                    dict(figures, **summary), "met" if met else "MISS"))
    return out


def render(targets=None):
    """The markdown table of every target."""
    lines = ["| target | goal | lite/TFM median [min–max] | rounds lite ahead | verdict | CPU, "
             "load average (1 min) over the rounds | commit, results file |",
             "|---|---|---|---|---|---|---|"]
    table = rows(targets)
    for what, comparison, threshold, name, commit, s, verdict in table:
        load = s["load"]
        load_text = f"{load[0]:.1f}–{load[1]:.1f}" if load else "not recorded"
        # A median that rounds onto the goal is printed to 4 decimals: its verdict shows why.
        digits = 4 if round(s["median"], 3) == threshold else 3
        lines.append(
            f"| {what} | {comparison} {threshold:g} | {s['median']:.{digits}f} [{s['min']:.3f}–"
            f"{s['max']:.3f}] | {s['wins']}/{len(s['ratios'])} | {verdict} | "
            f"{s['cpu'] or 'CPU not recorded'}, {load_text} | `{commit}`, "
            f"`benchmarks/results/{name}` |")
    met = sum(row[-1] == "met" for row in table)
    lines += ["", f"{met} of {len(table)} targets met on the median."]
    return "\n".join(lines) + "\n"
