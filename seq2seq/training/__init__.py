"""The torch layer: the transformer, its search backend, training, batches, checkpoints, guided alignment.

The only folder under `seq2seq/` that imports torch; serving never reaches it.
"""
