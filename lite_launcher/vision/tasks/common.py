"""What the backbone -> decoder -> head tasks share (segmentation, RetinaNet, and Mask R-CNN
next): no family of its own, so every family's task may import it."""

from __future__ import annotations

from lite_launcher.checkpointing import checkpoints


def restore_init_checkpoint(model, task_config) -> None:
    """TFM's `initialize` of every vision task: restores `task_config.init_checkpoint` (if
    set) into the parts `init_checkpoint_modules` names. Which names a family takes is checked
    by its config (`configs.common.init_modules`); which objects they are is the model's
    `init_checkpoint_items` ('all': the whole model, as its TFM task reads it; 'backbone',
    'decoder': those parts). A TFM-written checkpoint is mapped onto them by
    `tfm_checkpoint`."""
    path = task_config.init_checkpoint
    if path:
        checkpoints.read_weights(model.init_checkpoint_items(task_config.init_modules()), path,
                                 what="task.init_checkpoint")
