"""What the backbone -> decoder -> head tasks share (segmentation, RetinaNet, and Mask R-CNN
next): no family of its own, so every family's task may import it."""

from __future__ import annotations

from lite_launcher import checkpoints


def restore_init_checkpoint(model, task_config) -> None:
    """TFM's `initialize` of those tasks: restores `task_config.init_checkpoint` (if set) into
    every checkpoint item ('all': backbone, decoder, head) or the ones
    `init_checkpoint_modules` names ('backbone', 'decoder'). A TFM-written checkpoint is mapped
    onto them by `tfm_checkpoint`.

    `model` is a `modeling.factory.BackboneDecoderHead` model.
    """
    path = task_config.init_checkpoint
    if path:
        checkpoints.read_weights(model.init_checkpoint_items(task_config.init_modules()), path,
                                 what="task.init_checkpoint")
