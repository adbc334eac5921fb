"""Vision heads (TFM's modeling/heads/)."""
