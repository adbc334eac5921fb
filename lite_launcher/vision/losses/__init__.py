"""Vision losses (TFM's official/vision/losses/)."""
