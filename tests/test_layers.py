"""The layers only point down, and the serving path never imports torch.

    data  <  the inference library (torch-free)  <  model/training (torch), export, loading  <  service and CLIs

A module's layer is read off the folder it lives in, never off a list of names, so a new
module is placed by where it is created:

- `data/`: corpora, splits, the tokenizer.
- `seq2seq/core/`, `seq2seq/analysis/`, `seq2seq/decoding/`, `seq2seq/runtime/`: the
  torch-free inference library, and `seq2seq/documents/` above it (markup carried by the
  alignment, file formats: it uses the translator and teacher forcing). Inside it a module
  imports its own folder or a lower one: core < analysis < decoding, runtime < documents
  (decoding and runtime are peers and do not import each other).
- `seq2seq/training/`, `export/`, and `seq2seq/loading.py` (the one bridge: it reaches
  `training/` lazily, for the torch backend only): the torch layer.
- `service/`, `seq2seq/cli/`: the top. Inside the service, role folders too (`SERVICE_PARTS`):
  settings < compute (the models and their scheduler) < http (errors, bodies, access,
  connections, middleware) < shared (the request context, what the routes share) < routes
  (one module per route group) < app, serve; a route imports no other route.
- `seq2seq/` imports no package built on it (`export/`, `service/`), its command line
  included: a command that runs them lives in their folder (`export/cli.py`) and the
  `crossalign` table names it by module.

Every import in the project's packages, at module level or inside a function,
`TYPE_CHECKING` included, is read from the source (ast) and checked against that order;
a static check finds any `import torch` outside the torch layer; and the serving path is
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
# The folders of the torch-free library and their rank: a module imports its own folder or
# one of lower rank. Folders of equal rank are peers and do not import each other.
LIBRARY_FOLDERS = {"core": 0, "analysis": 1, "decoding": 2, "runtime": 2, "documents": 3}
TORCH_FOLDERS = ("training",)
# The service's parts and their rank: its role folders, the settings below them all, the app
# and its command above. A module imports its own part or a lower one; in a peerless folder
# (the routes: one module per route group) no module imports another of its folder.
SERVICE_PARTS = {"settings": 0, "compute": 1, "http": 2, "shared": 3, "routes": 4, "app": 5, "serve": 5}
PEERLESS_FOLDERS = ("routes",)


def layer_of(module: str) -> int | None:
    """The layer of a project module (dotted name), from its folder; None if unplaced."""
    parts = module.split(".")
    if parts[0] == "data":
        return DATA
    if parts[0] == "export":
        return TORCH
    if parts[0] == "service":
        return TOP
    if parts[0] != "seq2seq":
        return None
    if len(parts) == 1 or parts[1] in LIBRARY_FOLDERS:
        return LIBRARY
    if parts[1] in TORCH_FOLDERS or parts[1] == "loading":
        return TORCH
    if parts[1] == "cli":
        return TOP
    return None


def library_folder(module: str) -> str | None:
    """`core`, `analysis`, ... for a module of the torch-free library's folders, else None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "seq2seq" and len(parts) > 2 and parts[1] in LIBRARY_FOLDERS else None


def service_part(module: str) -> str | None:
    """`compute`, `routes`, `app`, ... for a module of the service (the package itself: None)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "service" and len(parts) > 1 and parts[1] in SERVICE_PARTS else None


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str) -> list[tuple[int, str, bool]]:
    """(line, dotted name, at module level) of every import in `path`, anywhere in it."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
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
        found += [(node.lineno, name, id(node) in top_level) for name in names]
    return found


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every project module that `path` imports, anywhere in it."""
    return [(line, name) for line, name, _ in imported_names(path, module) if name.split(".")[0] in PACKAGES]


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` (a module, or a name inside one) refers to."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


# The packages built on `seq2seq/`: it never imports them, not even its command line (a
# command that runs them lives there and `crossalign` names it by module: seq2seq/cli).
ABOVE_SEQ2SEQ = ("export", "service")


def may_import(importer: str, imported: str) -> bool:
    """The rule: layers point down; inside the library, folders point down too; `seq2seq/`
    imports no package built on it."""
    if importer.split(".")[0] == "seq2seq" and imported.split(".")[0] in ABOVE_SEQ2SEQ:
        return False
    own, theirs = layer_of(importer), layer_of(imported)
    if own is None or theirs is None:
        return True  # reported by test_every_module_has_a_layer
    if theirs != own:
        return theirs < own
    part, other_part = service_part(importer), service_part(imported)
    if part is not None and other_part is not None:
        if part == other_part:
            return part not in PEERLESS_FOLDERS or importer == imported
        return SERVICE_PARTS[other_part] < SERVICE_PARTS[part]
    mine, other = library_folder(importer), library_folder(imported)
    if mine is None or other is None:  # seq2seq/__init__ or outside the library's folders
        return True
    return other == mine or LIBRARY_FOLDERS[other] < LIBRARY_FOLDERS[mine]


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in project_modules() if layer_of(name) is None]
    assert not unplaced, f"these modules sit in no layer's folder (tests/test_layers.py): {unplaced}"


def test_seq2seq_holds_only_folders_and_the_loader() -> None:
    loose = sorted(p.name for p in (REPO / "seq2seq").glob("*.py"))
    assert loose == ["__init__.py", "loading.py"], f"put these modules in a role folder: {loose}"


def test_service_holds_only_folders_the_app_its_command_and_settings() -> None:
    loose = sorted(p.name for p in (REPO / "service").glob("*.py"))
    assert loose == ["__init__.py", "app.py", "serve.py", "settings.py"], f"put these modules in a role folder: {loose}"
    folders = sorted(p.name for p in (REPO / "service").iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders == sorted(name for name in SERVICE_PARTS if (REPO / "service" / name).is_dir())
    unplaced = [m for m in project_modules() if m.startswith("service.") and service_part(m) is None]
    assert not unplaced, f"service modules in no part of SERVICE_PARTS: {unplaced}"


def test_imports_only_point_down() -> None:
    modules = project_modules()
    upward = []
    for module, path in modules.items():
        for line, name in imported_modules(path, module):
            target = resolve(name, modules)
            if target is not None and not may_import(module, target):
                upward.append(
                    f"{path.relative_to(REPO)}:{line}: {module} ({LAYER_NAMES[layer_of(module)]}, "
                    f"{library_folder(module) or '-'}) imports {target} ({LAYER_NAMES[layer_of(target)]}, "
                    f"{library_folder(target) or '-'})"
                )
    assert not upward, (
        f"imports against the layers' order (and seq2seq/ imports none of {ABOVE_SEQ2SEQ}):\n" + "\n".join(upward)
    )


def test_no_import_cycle_among_project_modules() -> None:
    """Every import counts, lazy and `TYPE_CHECKING` ones too: a cycle is a layout error."""
    modules = project_modules()
    edges = {
        module: {
            target
            for _, name in imported_modules(path, module)
            if (target := resolve(name, modules)) is not None
            and target != module
            # a package's own __init__ is an ancestor, not a dependency
            and not module.startswith(target + ".")
        }
        for module, path in modules.items()
    }
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        path = [*path, module]
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, path)
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_a_format_module_imports_no_other_format() -> None:
    """One module per document format (seq2seq/documents/formats/): each imports only the
    readers' shared module from its folder, so a new format touches its module, the table
    (`seq2seq.documents.files.FORMATS`) and a test, and no other format."""
    modules = project_modules()
    shared = {"seq2seq.documents.formats", "seq2seq.documents.formats.limits"}
    found = []
    for module, path in modules.items():
        if not module.startswith("seq2seq.documents.formats."):
            continue
        for line, name in imported_modules(path, module):
            target = resolve(name, modules)
            if target and target.startswith("seq2seq.documents.formats.") and target not in shared | {module}:
                found.append(f"{path.relative_to(REPO)}:{line}: {module} imports {target}")
    assert len([m for m in modules if m.startswith("seq2seq.documents.formats.")]) >= 9
    assert not found, "a format imports another format's module:\n" + "\n".join(found)


def test_torch_is_imported_only_in_the_torch_layer() -> None:
    """Static: no `import torch` anywhere in data, the library folders, the service or the
    CLIs, and in the loader only inside a function (the torch backend's branch)."""
    found = []
    for module, path in project_modules().items():
        layer = layer_of(module)
        for line, name, at_top in imported_names(path, module):
            if name.split(".")[0] != "torch":
                continue
            lazy_bridge = module == "seq2seq.loading" and not at_top
            if layer != TORCH or (module == "seq2seq.loading" and not lazy_bridge):
                found.append(f"{path.relative_to(REPO)}:{line}: {module} imports {name}")
    assert not found, "torch imported outside seq2seq/training and export:\n" + "\n".join(found)


def test_the_checker_sees_upward_and_sideways_imports(tmp_path: Path) -> None:
    """The checker itself: a library module importing the service, the loader or a peer
    folder, even lazily, is found."""
    path = tmp_path / "translator.py"
    path.write_text(
        "def f():\n    from service.compute.engine import Engine\n    import seq2seq.loading\n"
        "    from seq2seq.runtime import bundle\n"
    )
    modules = project_modules()
    targets = [resolve(name, modules) for _, name in imported_modules(path, "seq2seq.decoding.translator")]
    refused = {t for t in targets if t and not may_import("seq2seq.decoding.translator", t)}
    assert {"service.compute.engine", "seq2seq.loading", "seq2seq.runtime.bundle"} <= refused
    assert may_import("seq2seq.decoding.translator", "seq2seq.analysis.quality")
    assert not may_import("seq2seq.core.config", "seq2seq.analysis.quality")
    # The command line is the top layer, yet inside `seq2seq/`: it may not reach `export/`.
    assert not may_import("seq2seq.cli.export", "export.exporter")
    assert not may_import("seq2seq.cli.translate", "service.compute.engine")
    assert may_import("seq2seq.cli.translate", "seq2seq.loading") and may_import("export.cli", "export.exporter")
    # The service: no route imports another; nothing below the routes imports one; a folder
    # imports its own modules (the routes excepted) and lower ones.
    assert not may_import("service.routes.stream", "service.routes.native")
    assert not may_import("service.shared.jobs", "service.routes.native")
    assert not may_import("service.compute.engine", "service.http.errors")
    assert may_import("service.shared.jobs", "service.shared.context")
    assert may_import("service.routes.stream", "service.shared.jobs")
    assert may_import("service.app", "service.routes.libre")


def test_the_torch_free_library_imports_without_torch() -> None:
    """Every module of the library's folders, imported in a fresh interpreter, with the loader."""
    names = sorted(m for m in project_modules() if layer_of(m) in (DATA, LIBRARY)) + ["seq2seq.loading"]
    code = f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
    code += "assert 'torch' not in sys.modules, 'torch was imported'\n"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_the_serving_path_never_imports_torch(tiny_bundle: Path, tmp_path: Path) -> None:
    """Load the bundle as `crossalign serve` does and use every route that runs the model."""
    code = textwrap.dedent(f"""
        import sys
        from fastapi.testclient import TestClient
        from service.app import create_app
        from service.settings import Settings

        text = {SENTENCES[0]!r}
        settings = Settings(models={str(tiny_bundle.parent)!r}, threads=1, files_dir={str(tmp_path)!r})
        with TestClient(create_app(settings)) as client:
            calls = [
                client.post("/translate", json={{"q": text, "source": "de", "target": "en", "alignment": True}}),
                client.post("/v1/translate", json={{"text": text, "source": "de", "n_best": 2, "beam_size": 2}}),
                client.post("/v1/align", json={{"text": text, "translation": "the dog is small .", "source": "de"}}),
                client.post("/v1/attention", json={{"text": text, "source": "de"}}),
                client.get("/v1/heatmap", params={{"q": text, "source": "de", "format": "svg"}}),
                client.post("/translate", json={{"q": "<p>" + text + "</p>", "source": "de", "target": "en",
                                                 "format": "html"}}),
                client.post("/translate_file", files={{"file": ("a.html", "<p>" + text + "</p>")}},
                            data={{"source": "de", "target": "en"}}),
            ]
        for response in calls:
            assert response.status_code == 200, (response.request.url, response.text)
        assert "onnxruntime" in sys.modules
        assert "torch" not in sys.modules, "the serving path imported torch"
        assert "wordfreq" not in sys.modules, "the serving path imported wordfreq (a build-time dependency)"
        assert "ray" not in sys.modules, "the serving path imported Ray (only `crossalign translate --ray` may)"
    """)
    finished = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]


def test_every_command_names_a_module_with_its_two_functions() -> None:
    """`crossalign` imports a command's module by name only when it runs: each one named in
    seq2seq/cli/__init__.py exists and defines (or imports) `add_arguments(parser)` and
    `main(args)`."""
    from seq2seq.cli import COMMANDS, DATA_COMMANDS

    modules = project_modules()
    problems = []
    for name, (module, _) in {**COMMANDS, **{f"data {k}": v for k, v in DATA_COMMANDS.items()}}.items():
        if module not in modules:
            problems.append(f"{name}: no module {module}")
            continue
        tree = ast.parse(modules[module].read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        defined |= {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
        problems += [f"{name}: {module} has no {f}()" for f in ("add_arguments", "main") if f not in defined]
    assert COMMANDS["export"][0] == "export.cli"
    assert not problems, "\n".join(problems)


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
