// crossalign attention explorer: one map as a grid of cells, sized to the room it has, and the word
// strips beside it. Plain JavaScript, no build step; the page's scripts share one global scope
// (explorer.js: the state, the form, the API; maps.js: one map and the word strips; heads.js: the
// model view; playback.js: the decoding played back).
"use strict";

// ------------------------------------------------------------------ the current map

// {kind, rows, columns, matrix, links: Set("row,col"), rowName, columnName}
function currentMap() {
  const sentence = state.data.sentences[state.sentence];
  if (state.kind === "cross") {
    const aligned = sentence.alignment[state.level];
    const index = state.head === "mean" ? aligned.head_sets.length - 1 : Number(state.head);
    const links = new Set(aligned.links[state.layer][index].split(" ").filter(Boolean).map((pair) => {
      const [i, j] = pair.split("-");
      return `${j},${i}`;   // Pharaoh i-j: i = source column, j = target row
    }));
    return { kind: "cross", rows: aligned.target_tokens.map((t) => shown(t.text)),
             columns: aligned.source_tokens.map((t) => shown(t.text)), matrix: aligned.matrices[state.layer][index], links,
             rowName: "translation", columnName: "source" };
  }
  const maps = sentence[state.kind];
  const perHead = maps.weights[state.layer];                      // (heads, rows, columns)
  const matrix = state.head === "mean"
    ? perHead[0].map((row, r) => row.map((_, c) => perHead.reduce((sum, h) => sum + h[r][c], 0) / perHead.length))
    : perHead[Number(state.head)];
  return { kind: state.kind, rows: maps.rows, columns: maps.columns, matrix, links: new Set(),
           rowName: state.kind === "encoder" ? "source (query)" : "decoder input (query)",
           columnName: state.kind === "encoder" ? "source (key)" : "decoder input (key)" };
}

// The map's caption: what it is, what a row and a cell say, and what the red frames are, in words.
function describe() {
  const data = state.data;
  const head = state.head === "mean" ? "the mean of its heads" : `head ${state.head}`;
  const own = state.kind === "cross" && state.layer === data.alignment_layer && defaultHead("cross") === state.head;
  const which = `layer ${state.layer}, ${head}` + (own ? " (the model's alignment head)" : "");
  const shade = "Darker cells took more of the row's attention; each row adds up to 1.";
  if (state.kind === "encoder") {
    return `Encoder self-attention, ${which}, over the pieces the model reads. Each row is a source piece ` +
      `and shows which pieces it looked at (the columns). ${shade} The encoder reads the whole sentence at ` +
      "once, so a piece may look both ways.";
  }
  if (state.kind === "decoder") {
    return `Decoder self-attention, ${which}. Each row is a step of the translation: the piece it reads ` +
      `(<s>, then the pieces written so far) looking back at the pieces before it. ${shade} The hatched ` +
      "upper half is masked: a step cannot look at pieces not written yet.";
  }
  const unit = state.level === "word" ? "word" : "piece";
  // The step shift in plain words (the bundle says whether its maps are read so).
  const shifted = data.alignment_step_shift
    ? ` Each row is read one step late, as the decoder reads the ${unit} back in to write the next: where this ` +
      "model's alignment head was trained to look."
    : "";
  return `Cross-attention, ${which}, between ${unit}s: each row is a translated ${unit} and shows where in ` +
    `the source (the columns) the model looked for it. ${shade} Red frames: each translated ${unit}'s ` +
    `strongest source ${unit}, its link in the alignment.` + shifted;
}

function render() {
  const map = currentMap();
  state.map = map;
  $("map-caption").textContent = describe();
  drawGrid($("map"), map);
  renderTokens();
  fitMap();   // once everything above the map is in place
  updateDownloads();
  renderHeads();
}

// Cells scale with the room the map has: the column's width, and the window's height below
// the map's top (the first screen holds the translation and its map), within MIN_CELL..MAX_CELL.
const MIN_CELL = 14;
const MAX_CELL = 64;

function fitMap() {
  const grid = $("map");
  const box = grid.parentElement;
  const columns = Number(grid.dataset.columns) || 1;
  const rows = Number(grid.dataset.rows) || 1;
  const style = getComputedStyle(box);
  const frame = 2 * (parseFloat(style.paddingLeft) + parseFloat(style.borderLeftWidth));
  const top = box.getBoundingClientRect().top + window.scrollY;
  const below = $("map-figure").querySelector(".map-foot").offsetHeight + 16;  // the scale and the downloads
  // At least a third of the window: a map pushed below the fold (a narrow screen) still reads.
  const tall = Math.max(window.innerHeight / 3, window.innerHeight - top - below);
  const wide = box.parentElement.clientWidth;
  // Labels grow a little with the cells, so a big map still reads as one.
  const apply = (size) => {
    grid.style.setProperty("--cell", `${size}px`);
    grid.style.setProperty("--label-size", `${Math.min(1.05, Math.max(0.7, size / 40)).toFixed(2)}rem`);
  };
  const longest = (selector, side) => Math.max(0, ...[...grid.querySelectorAll(selector)].map((l) => l[side]));
  let size = MIN_CELL;
  // The labels take room from the cells and grow with them: a few passes settle it.
  for (let pass = 0; pass < 3; pass++) {
    apply(size);
    const across = wide - frame - longest(".row-label", "offsetWidth") - columns - 2;
    const down = tall - frame - longest(".col-label", "offsetHeight") - rows;
    size = Math.max(MIN_CELL, Math.min(MAX_CELL, Math.floor(Math.min(across / columns, down / rows))));
  }
  apply(size);
  // Whatever rounding is left over: a pixel less until the map is inside its room.
  while (size > MIN_CELL && (box.offsetHeight > tall || grid.offsetWidth + frame > wide)) apply(--size);
  grid.dataset.cell = String(size);
}

// A map as a grid of cells with its row and column labels (buttons, so the keyboard reaches
// them). map: {kind, rows, columns, matrix (rows of weights; a row may be shorter than the
// columns: the causal triangle while it grows), links: Set("row,col"), outputs (optional:
// what each row chose, shown after it)}.
function drawGrid(grid, map) {
  const extra = map.outputs ? 1 : 0;
  grid.style.gridTemplateColumns = `auto repeat(${map.columns.length}, var(--cell))` + (extra ? " auto" : "");
  grid.dataset.kind = map.kind;
  grid.dataset.rows = map.rows.length;
  grid.dataset.columns = map.columns.length;
  const cells = [Object.assign(document.createElement("div"), { className: "corner" })];
  map.columns.forEach((label, c) => cells.push(labelButton("col-label", label, { col: c },
    `column ${c + 1}: ${label}`)));
  if (extra) cells.push(Object.assign(document.createElement("div"), { className: "corner" }));
  map.rows.forEach((label, r) => {
    cells.push(labelButton("row-label", label, { row: r }, `row ${r + 1}: ${label}`));
    map.columns.forEach((column, c) => {
      const cell = document.createElement("div");
      cell.className = "cell";
      const masked = map.kind === "decoder" && c > r;
      const weight = c < map.matrix[r].length ? map.matrix[r][c] : 0;
      Object.assign(cell.dataset, { row: r, col: c, weight: String(weight) });
      cell.style.backgroundColor = blue(weight);   // keeps the hatching of masked cells
      if (weight === 0 && masked) cell.classList.add("masked");
      if (map.links.has(`${r},${c}`)) cell.classList.add("link");
      cell.title = `${label} → ${column}: ${fmt(weight)}`;
      cells.push(cell);
    });
    if (extra) {
      const output = document.createElement("span");
      output.className = "row-output";
      output.textContent = `→ ${map.outputs[r]}`;
      cells.push(output);
    }
  });
  grid.replaceChildren(...cells);
}

function labelButton(className, text, data, aria) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = className;
  button.textContent = text;
  button.setAttribute("aria-label", aria);
  Object.assign(button.dataset, data);
  return button;
}

// ------------------------------------------------------------------ the word strips

// The word alignment behind the strips: the cross-attention layer/head chosen when the map
// shows cross-attention, else the model's own alignment (its layer and default head).
function wordAlignment() {
  const aligned = state.data.sentences[state.sentence].alignment.word;
  const cross = state.kind === "cross";
  const layer = cross ? state.layer : state.data.alignment_layer;
  const head = cross ? state.head : defaultHead("cross");
  const index = head !== "mean" ? Number(head) : aligned.head_sets.length - 1;
  return { aligned, matrix: aligned.matrices[layer][index] };
}

// The quality flags of the sentence (read from the model's own word alignment): source words
// the translation probably left out, translated words drawn from no one source word.
const FLAGS = {
  source: ["untranslated", "untranslated: little attention reached this word; it was probably left out"],
  target: ["ungrounded", "ungrounded: drawn from no one source word; it may be made up"],
};
// What found the untranslated words (the quality block's `untranslated_by`): in the
// thorough mode, also how little the translation changed without the word.
const UNTRANSLATED_BY = {
  occlusion: "untranslated: the translation hardly changes without this word, and little attention " +
    "reached it; it was probably left out",
};

// Mark word `index` of `side` when the quality block flags it (dashed, with why in words).
function markFlag(element, side, index, quality) {
  const [flag, attentionWhy] = FLAGS[side];
  if (!quality || !quality[flag].includes(index)) return;
  const why = (side === "source" && UNTRANSLATED_BY[quality.untranslated_by]) || attentionWhy;
  element.classList.add(flag);
  element.title = why;
  element.setAttribute("aria-description", why);
}

// The confidence as a person can act on it: the bundle's calibration (calibration.json) reads
// it as the share of held-out sentences at this confidence that were usable, and a band.
const BAND_ADVICE = { low: "check or rewrite it", medium: "read it with care", high: "usually fine" };

function confidenceText(quality) {
  if (quality.confidence === null) return "confidence n/a.";
  const value = `confidence ${quality.confidence.toFixed(2)}`;
  const calibrated = quality.calibrated;
  if (!calibrated) return `${value}.`;
  return `${value}, ${calibrated.band}: about ${Math.round(calibrated.usable * 100)}% of such ` +
    `sentences were usable (${BAND_ADVICE[calibrated.band]}).`;
}

function renderTokens() {
  const { aligned } = wordAlignment();
  const quality = state.data.sentences[state.sentence].quality;
  const make = (tokens, side) => tokens.map((token, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "token";
    button.textContent = shown(token.text);
    Object.assign(button.dataset, { side, index: i });
    markFlag(button, side, i, quality);
    return button;
  });
  $("source-tokens").replaceChildren(...make(aligned.source_tokens, "source"));
  $("target-tokens").replaceChildren(...make(aligned.target_tokens, "target"));
  const flagged = quality ? quality.untranslated.length + quality.ungrounded.length : 0;
  $("flag-legend").hidden = !quality;
  $("flag-count").textContent = quality
    ? `${flagged} flagged (untranslated words found by ${quality.untranslated_by || "attention"}); ` +
      confidenceText(quality)
    : "";
}

function clearHighlights() {
  for (const el of document.querySelectorAll(".token")) {
    el.style.background = "";
    el.style.color = "";
    el.classList.remove("active");
  }
  for (const el of document.querySelectorAll(".map .active, .map .cross-hair")) {
    el.classList.remove("active", "cross-hair");
  }
}

function paintToken(el, weight) {
  el.style.background = blue(weight);
  el.style.color = inkFor(weight);
}

// A word of the source or the translation: the words it drew from (or that drew from it).
function highlightWord(side, index) {
  clearHighlights();
  const { aligned, matrix } = wordAlignment();
  const sources = [...$("source-tokens").children];
  const targets = [...$("target-tokens").children];
  let weights;
  if (side === "target") {
    weights = matrix[index];
    sources.forEach((el, j) => paintToken(el, weights[j]));
    targets[index].classList.add("active");
  } else {
    weights = matrix.map((row) => row[index]);
    targets.forEach((el, i) => paintToken(el, weights[i]));
    sources[index].classList.add("active");
  }
  const others = side === "target" ? aligned.source_tokens : aligned.target_tokens;
  const best = weights.indexOf(Math.max(...weights));
  const word = (side === "target" ? aligned.target_tokens : aligned.source_tokens)[index].text;
  $("readout").textContent = side === "target"
    ? `“${word}” drew most from “${others[best].text}” (${fmt(weights[best])}).`
    : `“${word}” gave most to “${others[best].text}” (${fmt(weights[best])}).`;
  if (state.kind === "cross" && state.level === "word") crossHair(side === "target" ? index : null,
                                                                  side === "source" ? index : null, false);
}

// ------------------------------------------------------------------ the grid

function crossHair(row, col, readout = true) {
  const map = state.map;
  const grid = $("map");
  if (row !== null) grid.querySelector(`.row-label[data-row="${row}"]`).classList.add("active");
  if (col !== null) grid.querySelector(`.col-label[data-col="${col}"]`).classList.add("active");
  for (const cell of grid.querySelectorAll(".cell")) {
    if ((row !== null && Number(cell.dataset.row) === row) || (col !== null && Number(cell.dataset.col) === col)) {
      cell.classList.add("cross-hair");
    }
  }
  if (!readout) return;
  if (row !== null && col !== null) {
    $("readout").textContent = `${map.rows[row]} → ${map.columns[col]}: ${fmt(map.matrix[row][col])}`;
  } else if (row !== null) {
    const weights = map.matrix[row];
    const top = weights.map((w, c) => [w, c]).sort((a, b) => b[0] - a[0]).slice(0, 3)
      .map(([w, c]) => `${map.columns[c]} ${fmt(w)}`);
    $("readout").textContent = `Row “${map.rows[row]}” puts its weight on: ${top.join(", ")}.`;
  } else {
    const weights = map.matrix.map((r) => r[col]);
    const top = weights.map((w, r) => [w, r]).sort((a, b) => b[0] - a[0]).slice(0, 3)
      .map(([w, r]) => `${map.rows[r]} ${fmt(w)}`);
    $("readout").textContent = `Column “${map.columns[col]}” is read most by: ${top.join(", ")}.`;
  }
  // At word level the grid's rows and columns are the strips' words: light them too.
  if (map.kind === "cross" && state.level === "word") {
    const side = row !== null ? "target" : "source";
    const strip = $(`${side}-tokens`).children[row !== null ? row : col];
    if (strip) strip.classList.add("active");
  }
}

function onPoint(event) {
  const target = event.target.closest(".cell, .row-label, .col-label, .token");
  if (!target) return;
  if (target.classList.contains("token")) {
    highlightWord(target.dataset.side, Number(target.dataset.index));
    return;
  }
  clearHighlights();
  const row = target.dataset.row === undefined ? null : Number(target.dataset.row);
  const col = target.dataset.col === undefined ? null : Number(target.dataset.col);
  crossHair(row, col);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["map", "source-tokens", "target-tokens"]) {
    $(id).addEventListener("mouseover", onPoint);
    $(id).addEventListener("focusin", onPoint);   // the keyboard equivalent of hovering
  }
});
