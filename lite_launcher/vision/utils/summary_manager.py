"""TFM's `official/vision/utils/summary_manager.py`, the module the semantic-segmentation
tutorial imports (`from official.vision.utils import summary_manager`): its one function,
`maybe_build_eval_summary_manager(params=, model_dir=)`, is `lite_launcher.orbit.summaries`'."""

from lite_launcher.orbit.summaries import maybe_build_eval_summary_manager  # noqa: F401
