"""Reusable Keras layers of the vision models (TFM's official/vision/modeling/layers)."""
