"""Torch-free decoding: the one beam search, the `Translator`, forced decoding, result records.

Imports `core` and `analysis`; every backend (onnxruntime, torch) runs the same search.
"""
