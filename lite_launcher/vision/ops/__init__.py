"""Detection and preprocessing ops (TFM's official/vision/ops)."""
