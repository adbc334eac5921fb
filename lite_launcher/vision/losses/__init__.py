"""Vision task losses (TFM's official/vision/losses)."""
