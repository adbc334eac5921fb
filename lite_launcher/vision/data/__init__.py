"""Data-preparation tools: TFRecord writers (TFM's official/vision/data/)."""
