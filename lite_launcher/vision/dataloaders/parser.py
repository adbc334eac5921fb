"""The base of every parser (TFM's `official/vision/dataloaders/parser.py`): a decoded record
in, `(features, labels)` out, one map function for training and another for evaluation."""

import abc


class Parser(abc.ABC):
    """Turns a decoder's dict into the model's inputs and the loss's labels; `parse_fn`
    picks the training or the evaluation map (augmentation, labels for metrics)."""

    @abc.abstractmethod
    def parse_train_data(self, data):
        """`(features, labels)` of one decoded record for training."""

    @abc.abstractmethod
    def parse_eval_data(self, data):
        """`(features, labels)` of one decoded record for evaluation."""

    def parse_fn(self, is_training: bool):
        """The map function for a training or an evaluation dataset."""
        return self.parse_train_data if is_training else self.parse_eval_data
