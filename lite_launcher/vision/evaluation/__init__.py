"""Vision metrics and evaluators (TFM's official/vision/evaluation/)."""
