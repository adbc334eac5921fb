"""Image classification on Keras 3 (TFM vision ported)."""
