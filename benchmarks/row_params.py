"""The (params, task) pair of one experiment and overrides, built by lite_launcher or by TFM,
each with its mixed-precision policy set as its own driver sets it: what every row module of
`step_vs_tfm.py` (detection_rows, video_rows) builds its two sides from."""


def lite_params_and_task(experiment, overrides, model_dir, extra_overrides=None):
    """lite_launcher's (params, task), the policy set as lite-train sets it; `extra_overrides`
    (tests shrinking a row's model) are applied after `overrides`."""
    import lite_launcher as ll
    from lite_launcher.common import distribute_utils as strategy_lib

    params = ll.get_exp_config(experiment)
    params.override(overrides)
    if extra_overrides:
        params.override(extra_overrides)
    params.validate()
    strategy_lib.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    return params, ll.get_task(params.task, logging_dir=model_dir)


def tfm_params_and_task(experiment, overrides, model_dir):
    """TFM's (params, task) (TFM's venv only), the policy set as its train.py sets it."""
    from official.core import exp_factory, task_factory
    from official.modeling import performance
    import official.vision.registry_imports  # noqa: F401  (registers the experiments)

    params = exp_factory.get_exp_config(experiment)
    params.override(overrides, is_strict=True)
    params.validate()
    if params.runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    return params, task_factory.get_task(params.task, logging_dir=model_dir)
