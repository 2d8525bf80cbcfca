"""The GPU round's files (`seq2seq.training.gpu_round`): the data archive that travels to the
device (`pack`), what the round leaves under the device's $OUT, and how that comes back into
model directories here (`unpack`).

The device returns at most 8 files, each at most 16 MiB and 64 MiB together, at most two
folders down, named in letters, digits, '.', '_' and '-' alone (`DEVICE_LIMITS`;
/work/.library/device/README.md, "Limits"). Anything past those limits does not come back,
so the round writes a shape that is within them by construction: ONE stream of records (a
model each: its weights packed, its config, history and training config), appended as each
phase ends and cut into parts of `PART_BYTES` (`stream.00`, `stream.01`, ...), and
`round.json`, rewritten after every phase, which indexes the stream (each record's offset,
size and sha256) beside what the round measured and, on a failure, the traceback. At most
`STREAM_PARTS` parts: `MAX_FILES` files in all, two fewer than the device allows.

The large model's weights travel as int8 with a float16 scale per row (`quantize_int8`; a
d 512, 6 + 6-layer model is ~46 MiB that way, ~92 MiB as float16), the served-size student's
as float16 (~16 MiB) when both fit `STREAM_BYTES`, else as int8 too. The tokenizer does not
travel back: `unpack` takes it from the packed data the round was given.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
from pathlib import Path

import torch

from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE

log = logging.getLogger("crossalign.gpu_round")

DATA_ARCHIVE = "data.tar.gz"
STUDENT_DIR = "student"  # in the archive: the served-size model to distil into (`pack --student`)
STUDENT_FILES = ("config.json", "model.pt", "spm.model")
# The data files the run reads (hints and links only when the data has them); the tokenizer
# first, so `unpack` finds it without reading the rest of the archive.
DATA_FILES = ("spm.model", "manifest.json", "valid.tsv", "train.tsv", "hints.train.jsonl", "eflomal.train.pharaoh")

MiB = 1024 * 1024
# What the device returns from $OUT (its README's "Limits"): checked by `check_return`.
DEVICE_LIMITS = {"files": 8, "file_bytes": 16 * MiB, "total_bytes": 64 * MiB, "folders_down": 2}
NAME = re.compile(r"[A-Za-z0-9._-]+")
ROUND_FILE = "round.json"
PART_NAME = "stream.{:02d}"
PART_BYTES = 15 * MiB + MiB // 2  # half a MiB under the device's 16 MiB a file
STREAM_PARTS = 5
MAX_FILES = STREAM_PARTS + 1  # the parts and round.json
ROUND_FILE_BYTES = MiB // 2  # round.json stays far under this (a traceback, a few histories)
STREAM_BYTES = DEVICE_LIMITS["total_bytes"] - ROUND_FILE_BYTES  # < STREAM_PARTS * PART_BYTES
INT8_SUFFIX, SCALE_SUFFIX = ".int8", ".scale"
# A model directory's files that a record carries beside the weights (all JSON).
RECORD_JSON = {"config": CONFIG_FILE, "history": "history.json", "train_config": "train_config.json"}


# --------------------------------------------------------------------------- there: the data archive


def pack(data_dir: Path, out: Path, student: Path | None = None) -> Path:
    """`out/data.tar.gz`: the DATA_FILES of `data_dir` that exist, compressed, and with
    `student` (a model directory of the served size, e.g. a release bundle) its weights,
    config and tokenizer, for the distillation. The student's tokenizer must be the data's:
    it is fine-tuned on that data."""
    if student is not None and (student / "spm.model").read_bytes() != (data_dir / "spm.model").read_bytes():
        raise ValueError(f"{student}/spm.model is not the tokenizer {data_dir} was prepared with")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / DATA_ARCHIVE, "w:gz") as archive:
        for name in DATA_FILES:
            if (data_dir / name).is_file():
                archive.add(data_dir / name, arcname=name)
        for name in STUDENT_FILES if student is not None else ():
            archive.add(student / name, arcname=f"{STUDENT_DIR}/{name}")
    return out


def packed_tokenizer(pack_dir: Path, out: Path) -> Path:
    """The packed data's spm.model, written to `out` (what `unpack` gives the models back)."""
    with tarfile.open(pack_dir / DATA_ARCHIVE) as archive:
        member = archive.extractfile("spm.model")
        if member is None:
            raise ValueError(f"{pack_dir / DATA_ARCHIVE} holds no spm.model")
        out.write_bytes(member.read())
    return out


# --------------------------------------------------------------------------- back: the limits


def check_return(out: Path) -> list[str]:
    """What under `out` the device would not return, in words (empty: all of it comes back).
    Also holds the round to its own MAX_FILES."""
    problems, files, total = [], 0, 0
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if not NAME.fullmatch(path.name):
            problems.append(f"{relative}: a name outside letters, digits, '.', '_' and '-'")
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            problems.append(f"{relative}: not a plain file or folder")
        elif path.is_file():
            files, size = files + 1, path.stat().st_size
            total += size
            if size > DEVICE_LIMITS["file_bytes"]:
                problems.append(f"{relative}: {size} bytes, over {DEVICE_LIMITS['file_bytes']}")
            if len(relative.parts) - 1 > DEVICE_LIMITS["folders_down"]:
                problems.append(f"{relative}: more than {DEVICE_LIMITS['folders_down']} folders down")
    if files > MAX_FILES:
        problems.append(f"{files} files, over the round's {MAX_FILES} (the device returns {DEVICE_LIMITS['files']})")
    if total > DEVICE_LIMITS["total_bytes"]:
        problems.append(f"{total} bytes in all, over {DEVICE_LIMITS['total_bytes']}")
    return problems


# --------------------------------------------------------------------------- weights


def half(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def quantize_int8(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weight-only int8 for the trip back: every float matrix (out, in) as int8 rows with one
    float16 scale per row (symmetric, max-abs; (out, 1)), other tensors as float16;
    `dequantize_int8` inverts it to within half a step of each row. Half the bytes of
    float16, which is what lets a 48M-parameter model come back at all."""
    matrices = {name: value for name, value in state.items() if value.is_floating_point() and value.dim() == 2}
    packed = half({name: value for name, value in state.items() if name not in matrices})
    for name, value in matrices.items():
        scale = value.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
        packed[name + INT8_SUFFIX] = torch.round(value.float() / scale).to(torch.int8)
        packed[name + SCALE_SUFFIX] = scale.half()
    return packed


def dequantize_int8(packed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float16 state dict of a `quantize_int8` packing (a plain state dict passes through)."""
    state = {}
    for name, value in packed.items():
        if name.endswith(INT8_SUFFIX):
            base = name[: -len(INT8_SUFFIX)]
            state[base] = (value.float() * packed[base + SCALE_SUFFIX].float()).half()
        elif not name.endswith(SCALE_SUFFIX):
            state[name] = value
    return state


def state_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(v.numel() * v.element_size() for v in state.values())


def packing_for(state: dict[str, torch.Tensor], bytes_left: int) -> str:
    """How a served-size model travels: "float16" when its record fits what is left of the
    stream (with a MiB for its JSON), else "int8"."""
    return "float16" if state_bytes(half(state)) + MiB <= bytes_left else "int8"


def model_record(state: dict[str, torch.Tensor], model_dir: Path, packing: str) -> bytes:
    """One model as a stream record: its weights packed ("int8" or "float16") and its JSON files."""
    weights = quantize_int8(state) if packing == "int8" else half(state)
    record: dict = {"packing": packing, "weights": weights}
    for key, name in RECORD_JSON.items():
        record[key] = (model_dir / name).read_text(encoding="utf-8")
    buffer = io.BytesIO()
    torch.save(record, buffer)
    return buffer.getvalue()


# --------------------------------------------------------------------------- the stream and round.json


class RoundFiles:
    """$OUT as the round writes it: the stream's parts and round.json (`summary`, which the
    round fills in and `write` rewrites, atomically)."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        if (out / ROUND_FILE).exists() or (out / PART_NAME.format(0)).exists():
            raise ValueError(f"{out} holds an earlier round's files: give the round an empty folder")
        self.summary: dict = {"status": "running", "stream": {"parts": [], "records": []}}
        self.size = 0

    @property
    def stream_bytes_left(self) -> int:
        return STREAM_BYTES - self.size

    def append(self, name: str, blob: bytes, **about: object) -> dict:
        """Add one record to the stream (filling the last part, then new ones), synced to disk,
        and index it in round.json; returns its index entry."""
        if len(blob) > self.stream_bytes_left:
            raise ValueError(f"record {name}: {len(blob)} bytes, {self.stream_bytes_left} left in the stream")
        entry = {"name": name, "offset": self.size, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
        entry.update(about)
        view = memoryview(blob)
        while view:
            part, used = divmod(self.size, PART_BYTES)
            path = self.out / PART_NAME.format(part)
            with open(path, "ab") as handle:
                written = handle.write(view[: PART_BYTES - used])
                handle.flush()
                os.fsync(handle.fileno())
            view, self.size = view[written:], self.size + written
        parts = self.summary["stream"]["parts"]
        parts[:] = [
            {"name": PART_NAME.format(i), "bytes": (self.out / PART_NAME.format(i)).stat().st_size}
            for i in range(-(-self.size // PART_BYTES))
        ]
        self.summary["stream"]["records"].append(entry)
        self.write()
        return entry

    def write(self) -> None:
        text = json.dumps(self.summary, indent=1) + "\n"
        temporary = self.out / (ROUND_FILE + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(self.out / ROUND_FILE)


def unpack(parts_dir: Path, out: Path, tokenizer: Path) -> list[Path]:
    """The stream's records as model directories under `out` (`out/teacher`, `out/student`:
    model.pt in float16, config.json, history.json, train_config.json, `tokenizer` as
    spm.model, round.json), which `crossalign eval --backend torch`, `export` and `train
    --init-from` take. A record whose bytes are missing or altered (a part that did not come
    back) is left out and named in the log; the others still unpack."""
    summary = json.loads((parts_dir / ROUND_FILE).read_text(encoding="utf-8"))
    stream = bytearray()
    for part in summary["stream"]["parts"]:
        path = parts_dir / part["name"]
        found = path.read_bytes() if path.is_file() else b""
        # A missing or cut part keeps its place, so the records after it still line up.
        stream += found if len(found) == part["bytes"] else bytes(part["bytes"])
    made = []
    for entry in summary["stream"]["records"]:
        blob = bytes(stream[entry["offset"] : entry["offset"] + entry["bytes"]])
        if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            log.warning("record %s: its bytes did not all come back (sha256 differs); left out", entry["name"])
            continue
        record = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        target = out / entry["name"]
        target.mkdir(parents=True, exist_ok=True)
        torch.save(dequantize_int8(record["weights"]), target / WEIGHTS_FILE)
        for key, name in RECORD_JSON.items():
            (target / name).write_text(record[key], encoding="utf-8")
        shutil.copyfile(tokenizer, target / TOKENIZER_FILE)
        shutil.copyfile(parts_dir / ROUND_FILE, target / ROUND_FILE)
        made.append(target)
    return made
