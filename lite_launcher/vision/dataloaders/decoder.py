"""The base of every record decoder (TFM's `official/vision/dataloaders/decoder.py`): one
serialized record in, a dict of tensors out, run inside a `tf.data` map."""

import abc


class Decoder(abc.ABC):
    """Decodes one serialized record (a `tf.train.Example`, a `tf.train.SequenceExample`,
    ...) into a dict of tensors for a parser."""

    @abc.abstractmethod
    def decode(self, serialized_example):
        """A dict of tensors decoded from one record (a string tensor); traced in a
        `tf.data` map, so it must be graph-safe."""
