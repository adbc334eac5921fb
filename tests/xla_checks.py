"""Checks that a trainer's traced train loop really runs an XLA-compiled step."""

import tensorflow as tf


def xla_compiled_calls(trainer):
    """Names of the functions the trainer's train-loop graph calls with XLA compilation forced.

    Looks through the traced loop (the graph TensorFlow runs, and every function it calls) for
    call ops marked `_XlaMustCompile`: what `tf.function(..., jit_compile=True)` leaves when
    it is called from inside another function. Empty when nothing is compiled.
    """
    iterator = trainer._train_loop.iterator  # pylint: disable=protected-access
    assert iterator is not None, "train the trainer once before checking its loop"
    concrete = trainer._train_loop.loop_fn.get_concrete_function(  # pylint: disable=protected-access
        iterator, tf.TensorSpec([], tf.int32))
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return sorted(node.attr["f"].func.name for node in nodes
                  if "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b)
