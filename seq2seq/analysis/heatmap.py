"""Alignment heatmaps as PNG or SVG bytes (matplotlib, Agg; no pyplot, no torch).

Rows are target tokens (top to bottom), columns source tokens (left to right, labels on
top so the source reads like a sentence), the colour is the soft weight with a colour bar,
and every hard link is outlined. Source words flagged untranslated and target words flagged
ungrounded (seq2seq/analysis/quality.py) get an orange label and an orange frame around their
column / row, explained in a legend line. SVG keeps its labels as <text> elements, so they can be
searched and restyled. Used by the service's /v1/heatmap and by the batch CLI.
"""

from __future__ import annotations

import io
import re
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from seq2seq.analysis.heads import HeadStatistics  # noqa: E402
from seq2seq.core.alignment import Alignment, label  # noqa: E402

FORMATS = {"png": "image/png", "svg": "image/svg+xml"}
DPI = 100
CELL = 0.28  # inches per token
CAPTION_CHAR_PX = 7.0  # a caption character at font size 8 is at most this wide, in pixels (DejaVu Sans)
FLAG_COLOUR = "#e67e00"
FLAG_LEGEND = "orange, dashed: untranslated source word (little attention) / ungrounded target word (no clear source)"
LINK_LEGEND = "red frames: each row's strongest source token, its hard link"
# matplotlib's text layout and font cache are not thread-safe: one render at a time.
_RENDER_LOCK = threading.Lock()


def _parts(alignment: Any) -> tuple[list[str], list[str], list[list[float]], list[tuple[int, int]], str]:
    """(source labels, target labels, matrix, links, caption) from an Alignment or AlignmentMap."""
    source, target = [label(t.text) for t in alignment.source_tokens], [label(t.text) for t in alignment.target_tokens]
    if isinstance(alignment, Alignment):
        matrix, links, layer = alignment.matrix.tolist(), alignment.links, alignment.layer
        heads: Any = list(alignment.heads) or "mean"
    else:  # seq2seq.decoding.records.AlignmentMap (the API / JSONL record)
        matrix, layer, heads = alignment.matrix, alignment.layer, alignment.heads
        links = [(int(i), int(j)) for i, j in (p.split("-") for p in alignment.links.split())]
    heads_text = "mean of heads" if heads == "mean" else "heads " + ",".join(map(str, heads))
    # The step shift in plain words: the decoder writes a word, then reads it back in to write
    # the next; a step-shifted map takes each word's row from that second step.
    shift_text = (
        "; step-shifted: each target word's row is read one step later, as the decoder reads the word back in, "
        "which is where this model's alignment head was trained to look"
        if alignment.step_shift
        else ""
    )
    caption = (
        f"{alignment.level} alignment, layer {layer}, {heads_text}: a row per target {alignment.level}, how its "
        f"attention was spread over the source (each row sums to 1){shift_text}"
    )
    return source, target, matrix, links, caption


def default_size(n_source: int, n_target: int) -> tuple[int, int]:
    """(width, height) in pixels that fit the labels of an n_source x n_target map."""
    width = 2.4 + CELL * max(n_source, 4) + 1.0  # target labels + cells + colour bar
    height = 1.8 + CELL * max(n_target, 4) + 0.6  # source labels + cells + caption
    return int(round(width * DPI)), int(round(height * DPI))


def render_heatmap(
    alignment: Any,
    fmt: str = "png",
    width: int | None = None,
    height: int | None = None,
    title: str | None = None,
    axis_labels: tuple[str, str] = ("source", "target"),
    untranslated: Sequence[int] = (),
    ungrounded: Sequence[int] = (),
) -> bytes:
    """The heatmap of `alignment` (seq2seq.core.alignment.Alignment or seq2seq.decoding.records.AlignmentMap).

    `width`/`height` in pixels (default: fitted to the token counts). `axis_labels` name the
    columns and the rows (("keys", "queries") for a self-attention map). `untranslated`
    (source columns) and `ungrounded` (target rows) are the quality flags to mark, indices of
    a word-level map. Returns PNG or SVG bytes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    source, target, matrix, links, caption = _parts(alignment)
    if any(not 0 <= i < len(source) for i in untranslated) or any(not 0 <= j < len(target) for j in ungrounded):
        raise ValueError(f"flag indices outside the {len(target)} x {len(source)} map")
    default_width, default_height = default_size(len(source), len(target))
    width, height = width or default_width, height or default_height
    # svg.hashsalt: fixed element ids, so an SVG is the same bytes every time.
    with _RENDER_LOCK, matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "crossalign"}):
        figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
        axes = figure.add_subplot()
        _draw_map(figure, axes, matrix, links, (len(source), len(target)), untranslated, ungrounded)
        _draw_labels(axes, source, target, axis_labels, untranslated, ungrounded)
        legends = ([LINK_LEGEND] if links else []) + ([FLAG_LEGEND] if untranslated or ungrounded else [])
        _draw_caption(figure, [title or caption, *legends], width)
        return _saved(figure, fmt)


def _saved(figure: Figure, fmt: str) -> bytes:
    """The figure's PNG or SVG bytes, with no timestamp or version in the file: the same map
    downloads as the same bytes."""
    buffer = io.BytesIO()
    figure.savefig(
        buffer,
        format=fmt,
        dpi=DPI,
        metadata={"Software": None} if fmt == "png" else {"Date": None, "Creator": None},
    )
    return buffer.getvalue()


def _draw_map(
    figure: Figure,
    axes: Axes,
    matrix: list[list[float]],
    links: list[tuple[int, int]],
    shape: tuple[int, int],
    untranslated: Sequence[int],
    ungrounded: Sequence[int],
) -> None:
    """The cells, the links boxed in red, the flagged columns and rows dashed, the colour bar;
    shape is (source, target) token counts."""
    n_source, n_target = shape
    if not (n_source and n_target):
        axes.text(0.5, 0.5, "empty alignment", ha="center", va="center", transform=axes.transAxes)
        return
    # A mesh of cells, not an image: matplotlib resamples an image to the canvas in float
    # arrays (~35 bytes a pixel: 560 MB for 4000 x 4000), where Agg fills a mesh's cells in
    # place. In an SVG the mesh is one embedded raster, as the image was.
    image = axes.pcolormesh(
        np.arange(n_source + 1) - 0.5,
        np.arange(n_target + 1) - 0.5,
        np.asarray(matrix, dtype=np.float64).reshape(n_target, n_source),
        cmap="Blues",
        vmin=0.0,
        vmax=1.0,
        rasterized=True,
    )
    axes.set_xlim(-0.5, n_source - 0.5)
    axes.set_ylim(n_target - 0.5, -0.5)  # the first target token on top, as an image shows it
    for i, j in links:  # i = source column, j = target row
        axes.add_patch(Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=1.5))
    for i in untranslated:
        axes.add_patch(
            Rectangle((i - 0.5, -0.5), 1, n_target, fill=False, edgecolor=FLAG_COLOUR, linewidth=2, linestyle="--")
        )
    for j in ungrounded:
        axes.add_patch(
            Rectangle((-0.5, j - 0.5), n_source, 1, fill=False, edgecolor=FLAG_COLOUR, linewidth=2, linestyle="--")
        )
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02, label="attention weight")


def _draw_labels(
    axes: Axes,
    source: Sequence[str],
    target: Sequence[str],
    axis_labels: tuple[str, str],
    untranslated: Sequence[int],
    ungrounded: Sequence[int],
) -> None:
    """The tokens as tick labels (source on top), the flagged ones coloured, and the axis names."""
    axes.set_xticks(range(len(source)), source, rotation=90, parse_math=False)
    axes.set_yticks(range(len(target)), target, parse_math=False)
    axes.xaxis.tick_top()
    # Both label slots of a tick: the source labels are drawn on top (label2).
    for index in untranslated:
        tick = axes.xaxis.get_major_ticks()[index]
        tick.label1.set_color(FLAG_COLOUR)
        tick.label2.set_color(FLAG_COLOUR)
    for index in ungrounded:
        axes.yaxis.get_major_ticks()[index].label1.set_color(FLAG_COLOUR)
    axes.xaxis.set_label_position("top")
    axes.set_xlabel(axis_labels[0], parse_math=False)
    axes.set_ylabel(axis_labels[1], parse_math=False)


def _draw_caption(figure: Figure, lines: list[str], width: int) -> None:
    """The caption below the map, wrapped to the figure's width (a long one was cut at the
    right edge); as the figure's x label, constrained layout makes room for every line.
    The flags' legend is a line of its own, wrapped on its own."""
    columns = max(24, int(width / CAPTION_CHAR_PX))
    figure.supxlabel(
        "\n".join(textwrap.fill(line, width=columns) for line in lines),
        x=0.01,
        ha="left",
        multialignment="left",
        fontsize=8,
        parse_math=False,
    )


HEAD_INCHES = 1.7  # a thumbnail of the model view, and its title
HEAD_MARK_COLOUR = "#d62728"


def head_grid_size(layers: int, heads: int) -> tuple[int, int]:
    """(width, height) in pixels of the model view of `layers` x `heads` thumbnails."""
    return int(round((0.8 + HEAD_INCHES * heads) * DPI)), int(round((1.2 + (HEAD_INCHES + 0.35) * layers) * DPI))


def render_head_grid(
    maps: np.ndarray,
    statistics: HeadStatistics,
    marked: Sequence[tuple[int, int]],
    caption: str,
    fmt: str = "png",
    width: int | None = None,
    height: int | None = None,
) -> bytes:
    """The model view: every layer and head of one attention stack as a small heatmap, a
    layer per row of thumbnails, a head per column (bertviz's "model view").

    maps (L, H, R, C) over the raw tokens (rows = queries, top to bottom); `statistics`
    (seq2seq.analysis.heads) are written under each head's title; the (layer, head) pairs
    `marked` (the model's alignment heads) are framed in red. No token labels: at this size
    a map reads by its shape (a diagonal, a column on </s>). Returns PNG or SVG bytes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    layers, heads = maps.shape[:2]
    default_width, default_height = head_grid_size(layers, heads)
    width, height = width or default_width, height or default_height
    with _RENDER_LOCK, matplotlib.rc_context({"svg.fonttype": "none", "font.size": 8, "svg.hashsalt": "crossalign"}):
        figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
        grid = figure.subplots(layers, heads, squeeze=False)
        rows, columns = maps.shape[2:]
        for layer in range(layers):
            for head in range(heads):
                axes = grid[layer][head]
                axes.pcolormesh(
                    np.arange(columns + 1) - 0.5,
                    np.arange(rows + 1) - 0.5,
                    np.asarray(maps[layer, head], dtype=np.float64),
                    cmap="Blues",
                    vmin=0.0,
                    vmax=1.0,
                    rasterized=True,
                )
                axes.set_xlim(-0.5, columns - 0.5)
                axes.set_ylim(rows - 0.5, -0.5)
                axes.set_xticks([])
                axes.set_yticks([])
                is_marked = (layer, head) in marked
                axes.set_title(
                    f"layer {layer}, head {head}"
                    + (" (alignment)" if is_marked else "")
                    + f"\nH {statistics.entropy[layer, head]:.2f} · diag {statistics.diagonal[layer, head]:.2f}"
                    + f" · {statistics.mark} {statistics.mark_share[layer, head]:.2f}",
                    fontsize=7,
                    color=HEAD_MARK_COLOUR if is_marked else "black",
                    parse_math=False,
                )
                for spine in axes.spines.values():
                    spine.set_edgecolor(HEAD_MARK_COLOUR if is_marked else "#999999")
                    spine.set_linewidth(3 if is_marked else 0.5)
        legend = "H: entropy (0 one token, 1 even) · diag: weight near the diagonal · "
        legend += f"{statistics.mark}: weight on {statistics.mark}"
        _draw_caption(figure, [caption, legend], width)
        return _saved(figure, fmt)


def filename(source_lang: str, target_lang: str, text: str, fmt: str) -> str:
    """'alignment-de-en-das-haus-ist.png': ASCII, from the first words of the text."""
    words = re.findall(r"[a-z0-9]+", text.lower().encode("ascii", "ignore").decode())[:4]
    stem = "-".join(["alignment", source_lang, target_lang, *words])
    return f"{stem[:80]}.{fmt}"
