"""What every layer shares, as TFM's `official/common`: the distribution strategy
(`distribute_utils`), the command-line flags (`flags`), the built-in experiments and their
registration (`builtin_experiments`, `registry_imports`), the one-line errors (`errors`),
atomic writes, the model_dir lock, and the one adapter for private Keras names
(`keras_adapter`)."""
