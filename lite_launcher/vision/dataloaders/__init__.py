"""Decoders and parsers from records to model inputs (TFM's official/vision/dataloaders/)."""
