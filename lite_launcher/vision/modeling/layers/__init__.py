<<<<<<< HEAD
"""The layers and blocks the vision models share (TFM's modeling/layers/)."""
=======
"""Reusable Keras layers of the vision models (TFM's official/vision/modeling/layers)."""
>>>>>>> detops
