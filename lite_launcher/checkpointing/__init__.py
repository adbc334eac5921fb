"""The checkpoint lifecycle's one home (`checkpoints`: save, find, restore, recover, read
weights) and its reader of TFM-written checkpoints (`tfm_checkpoint`)."""
