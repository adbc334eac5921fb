"""Object-detection display helpers (TFM's official/vision/utils/object_detection/)."""
