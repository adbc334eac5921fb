"""Vision models and their building blocks (TFM's official/vision/modeling)."""
