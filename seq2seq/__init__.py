"""The inference library (torch-free), with the torch model and training beside it.

Torch-free, what serving runs: config, search, translator, alignment, forced, aer,
segment, onnx_backend, bundle, records, heatmap. Torch: model, torch_backend, train, and
loading (the one loader, above both backends; it imports torch only for the torch
backend). Command-line modules live in `seq2seq.cli`. tests/test_layers.py holds this
table and checks that imports only point down. Import submodules explicitly.
"""
