// crossalign attention explorer: the model view, every layer and head of one attention stack as
// labelled thumbnails. Plain JavaScript, no build step; the page's scripts share one global scope
// (explorer.js: the state, the form, the API; maps.js: one map and the word strips; heads.js: the
// model view; playback.js: the decoding played back).
"use strict";

// ------------------------------------------------------------------ the model view

// The heads marked in the model view: the model's alignment heads (all of its layer when it
// averages them all), for cross-attention only.
function isAlignmentHead(kind, layer, head) {
  const data = state.data;
  if (kind !== "cross" || layer !== data.alignment_layer) return false;
  return !data.alignment_heads.length || data.alignment_heads.includes(head);
}

const KIND_NAMES = { cross: "cross-attention", encoder: "encoder self-attention",
                     decoder: "decoder self-attention" };

// Every layer x head of the chosen attention type as small maps (one canvas each, a button
// that opens it large), with each head's statistics (from /v1/attention's `heads`).
function renderHeads() {
  const sentence = state.data.sentences[state.sentence];
  const maps = sentence[state.kind];
  const stats = sentence.heads[state.kind];
  const layers = maps.weights.length;
  const heads = maps.weights[0].length;
  $("heads-kind").textContent = `${KIND_NAMES[state.kind]}, ${layers} layers × ${heads} heads`;
  const grid = $("heads");
  grid.style.gridTemplateColumns = `auto repeat(${heads}, minmax(0, max-content))`;
  const cell = thumbCell(grid, heads, maps.rows.length, maps.columns.length);
  grid.dataset.layers = layers;
  grid.dataset.heads = heads;
  const items = [document.createElement("span")];
  for (let h = 0; h < heads; h++) {
    items.push(Object.assign(document.createElement("span"), { className: "heads-caption", textContent: `head ${h}` }));
  }
  for (let l = 0; l < layers; l++) {
    items.push(Object.assign(document.createElement("span"), { className: "heads-caption", textContent: `layer ${l}` }));
    for (let h = 0; h < heads; h++) {
      const marked = isAlignmentHead(state.kind, l, h);
      const numbers = headNumbers(stats, l, h);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "head" + (marked ? " alignment" : "");
      Object.assign(button.dataset, { layer: l, head: h, entropy: stats.entropy[l][h],
                                      diagonal: stats.diagonal[l][h], markShare: stats.mark_share[l][h] });
      button.setAttribute("aria-label", `Layer ${l}, head ${h}${marked ? ", the alignment head" : ""}: ` +
        `${numbers.long}. Open it large.`);
      const caption = document.createElement("span");
      caption.className = "head-stats";
      caption.textContent = numbers.short;
      button.append(thumbnail(maps.rows, maps.columns, maps.weights[l][h], cell), caption);
      items.push(button);
    }
  }
  grid.replaceChildren(...items);
  if (state.openHead && !$("head-detail").hidden) openHead(...state.openHead);
  updateHeadDownloads();
}

function headNumbers(stats, layer, head) {
  const [entropy, diagonal, share] = [stats.entropy, stats.diagonal, stats.mark_share].map((m) => fmt(m[layer][head]));
  return { short: `H ${entropy} · diag ${diagonal} · ${stats.mark} ${share}`,
           long: `entropy ${entropy}, diagonal ${diagonal}, weight on ${stats.mark} ${share}` };
}

// A thumbnail's cell, px: the heads of a layer share the row's width (less the layer captions
// and each thumbnail's row labels), at most THUMB_HEIGHT tall, within 2..THUMB_MAX_CELL.
const THUMB_MAX_CELL = 14;
const THUMB_HEIGHT = 260;
const THUMB_LABELS = 9;   // labels are drawn from this cell size up (smaller, they would not read)

function thumbCell(grid, heads, rows, columns) {
  const width = (grid.parentElement.clientWidth - 70) / heads - 70;
  return Math.max(2, Math.min(THUMB_MAX_CELL, Math.floor(Math.min(width / columns, THUMB_HEIGHT / rows))));
}

// One head's map as a thumbnail: the weights on a canvas (rows top to bottom, pixel-crisp at
// the screen's density), its tokens labelled on top (keys) and on the left (queries) when the
// cells are large enough to read them.
function thumbnail(rows, columns, matrix, cell) {
  const box = document.createElement("span");
  box.className = "thumb";
  box.setAttribute("aria-hidden", "true");
  box.style.setProperty("--thumb-cell", `${cell}px`);
  box.style.setProperty("--thumb-font", `${Math.min(11, cell - 1)}px`);
  const canvas = document.createElement("canvas");
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(columns.length * cell * ratio);
  canvas.height = Math.round(rows.length * cell * ratio);
  canvas.style.width = `${columns.length * cell}px`;
  canvas.style.height = `${rows.length * cell}px`;
  const context = canvas.getContext("2d");
  context.scale(ratio, ratio);
  matrix.forEach((row, r) => row.forEach((weight, c) => {
    context.fillStyle = blue(weight);
    context.fillRect(c * cell, r * cell, cell, cell);
  }));
  if (cell < THUMB_LABELS) {
    box.append(canvas);
    return box;
  }
  const strip = (className, tokens) => {
    const labels = Object.assign(document.createElement("span"), { className });
    labels.append(...tokens.map((token) => Object.assign(document.createElement("span"), { textContent: token })));
    return labels;
  };
  box.append(document.createElement("span"), strip("thumb-cols", columns), strip("thumb-rows", rows), canvas);
  return box;
}

// One head large, with its tokens: the raw map of the model view.
function openHead(layer, head) {
  const sentence = state.data.sentences[state.sentence];
  const maps = sentence[state.kind];
  if (layer >= maps.weights.length) layer = maps.weights.length - 1;
  state.openHead = [layer, head];
  const marked = isAlignmentHead(state.kind, layer, head);
  $("head-detail-title").textContent = `${KIND_NAMES[state.kind]}, layer ${layer}, head ${head}` +
    (marked ? " (the alignment head)" : "");
  $("head-detail-stats").textContent = headNumbers(sentence.heads[state.kind], layer, head).long + ".";
  drawGrid($("head-map"), { kind: state.kind, rows: maps.rows, columns: maps.columns,
                            matrix: maps.weights[layer][head], links: new Set() });
  $("head-detail").hidden = false;
}

function onHeadChosen(event) {
  const button = event.target.closest(".head");
  if (!button) return;
  openHead(Number(button.dataset.layer), Number(button.dataset.head));
  $("head-close").focus();
}

function closeHead() {
  $("head-detail").hidden = true;
  const [layer, head] = state.openHead || [0, 0];
  const button = document.querySelector(`#heads .head[data-layer="${layer}"][data-head="${head}"]`);
  if (button) button.focus();
}

function updateHeadDownloads() {
  const [source, target] = state.pair;
  for (const format of ["png", "svg"]) {
    const params = new URLSearchParams({ q: state.text, source, target, format, view: "heads", kind: state.kind,
                                         ...searchParams() });
    const link = $(`download-heads-${format}`);
    link.href = "/v1/heatmap?" + params;
    link.setAttribute("aria-label", `Download every ${state.kind} head as ${format.toUpperCase()}`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("heads").addEventListener("click", onHeadChosen);
  $("head-close").addEventListener("click", closeHead);
  $("head-detail").addEventListener("keydown", (event) => { if (event.key === "Escape") closeHead(); });
});
