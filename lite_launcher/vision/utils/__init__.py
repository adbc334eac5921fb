"""Vision utilities (TFM's official/vision/utils/)."""
