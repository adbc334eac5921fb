"""The console commands, each a thin layer of flags over the libraries: `lite-train`
(`train`: TFM's `official/vision/train.py`), `lite-export` (`export`: TFM's
`serving/export_saved_model.py`), `lite-export-tflite` (`export_tflite`: TFM's
`serving/export_tflite.py`) and `lite-convert` (`convert`). No library imports a command;
no command imports another."""
