"""The model and its inference library, in folders that name their roles.

Torch-free (what serving runs), lower folders first; a module imports its own folder or a
lower one:

- `core/`: configuration (`ModelConfig`, `DecodeConfig`, `AlignmentOptions`), the search
  backend protocol and its cache, the alignment maths, input checks, sentence splitting,
  casing.
- `analysis/`: what reads a map or teacher-forces through a backend: quality signals,
  confidence, source occlusion, AER, heatmaps.
- `decoding/`: the one beam search and its candidates and repetition guard, the
  `Translator`, forced decoding (aligning a given translation), result records.
- `runtime/`: the release bundle and the onnxruntime backend.

Torch: `training/` (the model, its torch backend, training, data batches, checkpoints,
guided alignment). `loading.py` is the one bridge above both: it builds a `Translator` on
either backend and reaches `training/` only for `backend="torch"`. Command-line modules
live in `cli/`. tests/test_layers.py derives these rules from the folders and checks them.
Import submodules explicitly.
"""
