"""Orbit's part, without Orbit: the `Controller` (when to train, evaluate, checkpoint and write
summaries), the inner loops it runs (`loops`: TFM's `orbit.utils.loop_fns` and the standard
runners' loops) and the summary writers (`summaries`: `orbit.utils.SummaryManager`). Nothing
here knows a Task or a Trainer: the Controller drives any object with `train(n)` /
`evaluate(n)`."""
