"""The layers only point down, and the serving path never imports torch.

    data  <  the inference library (torch-free)  <  model/training (torch) and export  <  service and CLIs

Every import in the project's packages, at module level or inside a function, is read
from the source (ast) and checked against that order; a module the table below does not
place is an error too, so a new module has to say where it belongs. The serving path is
then run for real (bundle loaded on onnxruntime, every route that translates or aligns)
in a fresh interpreter, which must end without torch in `sys.modules`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from toy import SENTENCES

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("data", "seq2seq", "export", "service")

DATA, LIBRARY, TORCH, TOP = 0, 1, 2, 3
LAYER_NAMES = {DATA: "data", LIBRARY: "inference library", TORCH: "model/training and export", TOP: "service and CLIs"}
# The torch-free inference library: what serving runs (besides data.tokenizer).
LIBRARY_MODULES = {
    "config",
    "alignment",
    "quality",
    "occlusion",
    "confidence",
    "search",
    "candidates",
    "repeats",
    "backend",
    "translator",
    "casing",
    "forced",
    "segment",
    "aer",
    "records",
    "heatmap",
    "bundle",
    "onnx_backend",
    "inputs",
}
# torch, and what sits above both backends (the loader imports torch only for backend="torch").
TORCH_MODULES = {"model", "train", "train_data", "checkpoints", "guided", "torch_backend", "loading"}


def layer_of(module: str) -> int | None:
    """The layer of a project module (dotted name), or None if it is not placed."""
    parts = module.split(".")
    if parts[0] == "data":
        return DATA
    if parts[0] == "export":
        return TORCH
    if parts[0] == "service" or parts[:2] == ["seq2seq", "cli"]:
        return TOP
    if parts[0] == "seq2seq":
        if len(parts) == 1:
            return LIBRARY
        if parts[1] in LIBRARY_MODULES:
            return LIBRARY
        if parts[1] in TORCH_MODULES:
            return TORCH
    return None


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            modules[".".join(parts)] = path
    return modules


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every project module that `path` imports, anywhere in it."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from seq2seq.cli import batch` imports the submodule seq2seq.cli.batch.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in PACKAGES]
    return found


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` (a module, or a name inside one) refers to."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in project_modules() if layer_of(name) is None]
    assert not unplaced, f"place these modules in a layer (tests/test_layers.py): {unplaced}"


def test_imports_only_point_down() -> None:
    modules = project_modules()
    upward = []
    for module, path in modules.items():
        own = layer_of(module)
        for line, name in imported_modules(path, module):
            target = resolve(name, modules)
            if target is None or own is None:
                continue
            theirs = layer_of(target)
            if theirs is not None and theirs > own:
                upward.append(
                    f"{path.relative_to(REPO)}:{line}: {module} ({LAYER_NAMES[own]}) imports {target} "
                    f"({LAYER_NAMES[theirs]})"
                )
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a library module importing the service, even lazily, is found."""
    path = tmp_path / "translator.py"
    path.write_text("def f():\n    from service.engine import Engine\n    import seq2seq.loading\n")
    names = [name for _, name in imported_modules(path, "seq2seq.translator")]
    modules = project_modules()
    assert {layer_of(resolve(name, modules) or "") for name in names} >= {TOP, TORCH}


def test_the_serving_path_never_imports_torch(tiny_bundle: Path) -> None:
    """Load the bundle as `crossalign serve` does and use every route that runs the model."""
    code = textwrap.dedent(f"""
        import sys
        from fastapi.testclient import TestClient
        from service.app import create_app
        from service.settings import Settings

        text = {SENTENCES[0]!r}
        with TestClient(create_app(Settings(models={str(tiny_bundle.parent)!r}, threads=1))) as client:
            calls = [
                client.post("/translate", json={{"q": text, "source": "de", "target": "en", "alignment": True}}),
                client.post("/v1/translate", json={{"text": text, "source": "de", "n_best": 2, "beam_size": 2}}),
                client.post("/v1/align", json={{"text": text, "translation": "the dog is small .", "source": "de"}}),
                client.post("/v1/attention", json={{"text": text, "source": "de"}}),
                client.get("/v1/heatmap", params={{"q": text, "source": "de", "format": "svg"}}),
            ]
        for response in calls:
            assert response.status_code == 200, (response.request.url, response.text)
        assert "onnxruntime" in sys.modules
        assert "torch" not in sys.modules, "the serving path imported torch"
    """)
    finished = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]


def test_every_project_import_names_a_module_that_exists() -> None:
    """A lazy import of a moved module (inside a function) fails only when that code runs:
    catch it here, for every import in the project, wherever it sits."""
    modules = project_modules()
    missing = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                wanted = [node.module or ""]
            elif isinstance(node, ast.ImportFrom):
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                wanted = [".".join(anchor + ([node.module] if node.module else []))]
            else:
                continue
            missing += [
                f"{path.relative_to(REPO)}:{node.lineno}: {name}"
                for name in wanted
                if name.split(".")[0] in PACKAGES and name not in modules
            ]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)
