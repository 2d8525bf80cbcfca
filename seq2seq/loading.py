"""Load a `Translator` from a model directory with either backend.

A directory is a release bundle (bundle.json + ONNX graphs + config.json + model.pt +
spm.model) or a training output (config.json + model.pt + spm.model). The onnx backend
needs a bundle; the torch backend reads config.json + model.pt from either. Torch is
imported only for the torch backend.
"""

from __future__ import annotations

from pathlib import Path

from data.tokenizer import Tokenizer
from seq2seq.translator import Translator

BACKENDS = ("onnx", "torch")


def load_translator(model_dir: Path | str, backend: str = "onnx", threads: int = 0) -> Translator:
    model_dir = Path(model_dir)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    if backend == "onnx":
        from export.runtime import load_translator as load_onnx

        if not (model_dir / "bundle.json").is_file():
            raise FileNotFoundError(f"{model_dir}: no bundle.json; export the model with `crossalign export` "
                                    "or use --backend torch")
        return load_onnx(model_dir, backend="onnx", threads=threads)
    import torch

    from seq2seq.torch_backend import TorchBackend

    if threads:
        torch.set_num_threads(threads)
    return Translator(TorchBackend.from_directory(model_dir), Tokenizer(model_dir / "spm.model"))
