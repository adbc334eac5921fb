"""Writes tfm_adam_reference.json: TFM's Adam (tf_keras's legacy Adam, which TFM 2.20's
`adam` / `adamw` build on: one ResourceApplyAdam per variable) after 20 steps of fixed
gradients. Run in TFM's venv (`bash benchmarks/setup_tfm_env.sh`):

    .tfm_venv/bin/python tests/data/make_tfm_adam_reference.py
"""

import json
import os

import numpy as np

SHAPES = [(3, 4), (5,), (2, 2, 3)]
STEPS = 20


def inputs():
    """The initial values and per-step gradients (NumPy, seed 0): the test rebuilds them."""
    rng = np.random.default_rng(0)
    init = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    grads = [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    return init, grads


def main():
    # Imported here: the test imports inputs() without TensorFlow's tf_keras.
    import tensorflow as tf
    import tf_keras

    init, grads = inputs()
    variables = [tf.Variable(v) for v in init]
    optimizer = tf_keras.optimizers.legacy.Adam(1e-2, beta_1=0.9, beta_2=0.999, epsilon=1e-7)

    @tf.function
    def step(g):
        optimizer.apply_gradients(zip(g, variables))

    for g in grads:
        step([tf.constant(x) for x in g])
    out = {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
           "learning_rate": 1e-2, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7,
           "steps": STEPS, "values": [v.numpy().ravel().tolist() for v in variables]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfm_adam_reference.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path)


if __name__ == "__main__":
    main()
