"""Vision tasks, one per family: each wires model, input, loss, metrics (TFM's vision/tasks/)."""
