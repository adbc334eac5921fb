"""Vision backbones, one module per family, and their factory (TFM's modeling/backbones/)."""
