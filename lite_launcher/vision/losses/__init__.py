<<<<<<< HEAD
"""Vision losses (TFM's official/vision/losses/)."""
=======
"""Vision task losses (TFM's official/vision/losses)."""
>>>>>>> detops
