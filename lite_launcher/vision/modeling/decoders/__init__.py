"""Vision decoders and their factory (TFM's modeling/decoders/)."""
