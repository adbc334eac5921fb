"""The layers and blocks the vision models share (TFM's modeling/layers/)."""
