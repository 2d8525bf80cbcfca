"""Torch-free runtime: the release bundle (files, checksums, defaults) and the onnxruntime backend.

Imports `core` and `analysis`.
"""
