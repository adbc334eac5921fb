"""Image ops: preprocessing and augmentation (TFM's official/vision/ops/)."""
