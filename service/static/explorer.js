// crossalign attention explorer: plain JavaScript, no build step, no external requests.
//
// One call to POST /v1/attention returns every map of the translation (per sentence: the
// encoder and decoder self-attention and the cross-attention of every layer and head, and
// the word/subword alignment of every cross-attention layer and head). Switching type,
// layer, head or level redraws from that answer without asking the server again; only the
// download links go back to it (GET /v1/heatmap with the same selection).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { data: null, text: "", pair: null, beam: 4, sentence: 0, kind: "cross", layer: 0, head: "mean",
                level: "word" };
// The API key (when the server requires one) goes in an `Authorization: Bearer` header,
// never in a URL, so it stays out of access logs and browser history. It is typed into the
// page's key field (kept for this tab only) or, for old links, given as ?api_key=..., which
// is taken into the field and removed from the address bar at once.
const KEY_STORE = "crossalign-api-key";
function adoptKeyFromUrl() {
  const url = new URL(location.href);
  const key = url.searchParams.get("api_key");
  if (key) {
    sessionStorage.setItem(KEY_STORE, key);
    url.searchParams.delete("api_key");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  $("api-key").value = sessionStorage.getItem(KEY_STORE) || "";
}

// ------------------------------------------------------------------ colours

// matplotlib's "Blues" (the heatmap endpoint's map), five stops, linear in between.
const BLUES = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

function blue(weight) {
  const w = Math.min(1, Math.max(0, weight)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(w));
  const t = w - i;
  const c = BLUES[i].map((v, k) => Math.round(v + (BLUES[i + 1][k] - v) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// Dark cells get white text (contrast stays above 4.5:1 on every stop).
const inkFor = (weight) => (weight > 0.5 ? "#ffffff" : "#1a1a1a");
const fmt = (w) => w.toFixed(2);
// A bare space-marker piece covers the whitespace it stands for (its text is " ", or "" at
// the start of a text): it is labelled "▁", as the model's own pieces show it.
const shown = (text) => (text.trim() ? text : "\u2581");

// ------------------------------------------------------------------ the API

function authHeaders(headers = {}) {
  const key = $("api-key").value.trim();
  sessionStorage.setItem(KEY_STORE, key);
  return key ? { ...headers, Authorization: `Bearer ${key}` } : headers;
}

function languageName(code) {
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code;
  } catch (error) {
    return code;
  }
}

async function loadPairs() {
  const select = $("pair");
  try {
    const response = await fetch("/languages", { headers: authHeaders() });
    const languages = await response.json();
    const names = new Map(languages.map((l) => [l.code, l.name]));
    const named = (code) => names.get(code) || languageName(code);
    for (const language of languages) {
      for (const target of language.targets) {
        const option = new Option(`${language.name} → ${named(target)}`, `${language.code}:${target}`);
        select.add(option);
      }
    }
  } catch (error) {
    select.add(new Option("German → English", "de:en"));
  }
}

async function translate(event) {
  if (event) event.preventDefault();
  const text = $("text").value.trim();
  if (!text) {
    setStatus("Type a sentence first.", true);
    return;
  }
  const [source, target] = ($("pair").value || "de:en").split(":");
  const beam = Math.max(1, Math.min(8, parseInt($("beam").value, 10) || 4));
  $("go").disabled = true;
  setStatus("Translating…");
  try {
    const response = await fetch("/v1/attention", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify({ text, source, target, beam_size: beam }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    Object.assign(state, { data: body, text, pair: [source, target], beam, sentence: 0 });
    state.layer = state.kind === "cross" ? body.alignment_layer : layersOf(state.kind) - 1;
    state.head = defaultHead(state.kind);
    showResult();
    setStatus(`Translated by ${body.model} (beam ${beam}).`);
  } catch (error) {
    setStatus(`Could not translate: ${error.message}`, true);
  } finally {
    $("go").disabled = false;
  }
}

function setStatus(message, isError = false) {
  $("status").textContent = message;
  $("status").classList.toggle("error", isError);
}

// ------------------------------------------------------------------ selectors

function layersOf(kind) {
  return kind === "encoder" ? state.data.encoder_layers : state.data.decoder_layers;
}

// The model's own alignment (the bundle's alignment heads, e.g. a guided head) is what the
// API returns by default, so cross-attention starts on it; other stacks start on the mean.
function defaultHead(kind) {
  const heads = state.data.alignment_heads;
  return kind === "cross" && heads.length === 1 ? String(heads[0]) : "mean";
}

function fillSelect(select, options, value) {
  select.replaceChildren(...options.map(([v, label]) => new Option(label, String(v))));
  select.value = String(value);
}

function showResult() {
  const data = state.data;
  $("translation-text").textContent = data.translation;
  $("translation").hidden = false;
  $("explorer").hidden = false;
  $("sentence-field").hidden = data.sentences.length < 2;
  fillSelect($("sentence"), data.sentences.map((s, i) => [i, `${i + 1}: ${s.source}`]), state.sentence);
  syncSelectors();
  render();
}

function syncSelectors() {
  const data = state.data;
  const layers = layersOf(state.kind);
  state.layer = Math.min(state.layer, layers - 1);
  // Layers and heads count from 0, as in the API and the downloaded images.
  fillSelect($("layer"), [...Array(layers).keys()].map((l) => [l, `${l} (of 0–${layers - 1})` +
    (state.kind === "cross" && l === data.alignment_layer ? ", alignment layer" : "")]), state.layer);
  const isDefault = (h) => state.kind === "cross" && state.layer === data.alignment_layer &&
    data.alignment_heads.length === 1 && data.alignment_heads[0] === h;
  const heads = [["mean", "mean of heads"],
    ...[...Array(data.n_heads).keys()].map((h) => [h, `head ${h}` + (isDefault(h) ? ", alignment head" : "")])];
  fillSelect($("head"), heads, state.head);
  $("level").value = state.level;
  // Self-attention maps are over the pieces the model reads: the level applies to cross only.
  $("level").disabled = state.kind !== "cross";
  for (const radio of document.querySelectorAll('input[name="kind"]')) radio.checked = radio.value === state.kind;
}

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

function describe() {
  const names = { cross: "Cross-attention (alignment)", encoder: "Encoder self-attention",
                  decoder: "Decoder self-attention (masked)" };
  const head = state.head === "mean" ? "mean of heads" : `head ${state.head}`;
  const level = state.kind === "cross" ? `, ${state.level}s` : ", subword pieces";
  // The model's maps are read where each target token is the decoder input (step shift).
  const shifted = state.kind === "cross" && state.data.alignment_step_shift
    ? " Step-shifted: each row is read at the step where its token is the decoder input." : "";
  return `${names[state.kind]}, layer ${state.layer}, ${head}${level}. Rows are queries, columns keys; ` +
         "each row sums to 1." + shifted;
}

function render() {
  const map = currentMap();
  state.map = map;
  $("map-caption").textContent = describe();
  const grid = $("map");
  grid.style.gridTemplateColumns = `auto repeat(${map.columns.length}, var(--cell))`;
  grid.dataset.kind = map.kind;
  grid.dataset.rows = map.rows.length;
  grid.dataset.columns = map.columns.length;
  const cells = [Object.assign(document.createElement("div"), { className: "corner" })];
  map.columns.forEach((label, c) => cells.push(labelButton("col-label", label, { col: c },
    `column ${c + 1}: ${label}`)));
  map.rows.forEach((label, r) => {
    cells.push(labelButton("row-label", label, { row: r }, `row ${r + 1}: ${label}`));
    map.matrix[r].forEach((weight, c) => {
      const cell = document.createElement("div");
      cell.className = "cell";
      Object.assign(cell.dataset, { row: r, col: c, weight: String(weight) });
      cell.style.backgroundColor = blue(weight);   // keeps the hatching of masked cells
      if (weight === 0 && map.kind === "decoder" && c > r) cell.classList.add("masked");
      if (map.links.has(`${r},${c}`)) cell.classList.add("link");
      cell.title = `${label} → ${map.columns[c]}: ${fmt(weight)}`;
      cells.push(cell);
    });
  });
  grid.replaceChildren(...cells);
  renderTokens();
  updateDownloads();
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

function renderTokens() {
  const { aligned } = wordAlignment();
  const quality = state.data.sentences[state.sentence].quality;
  const make = (tokens, side) => tokens.map((token, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "token";
    button.textContent = shown(token.text);
    Object.assign(button.dataset, { side, index: i });
    const [flag, attentionWhy] = FLAGS[side];
    const why = (side === "source" && quality && UNTRANSLATED_BY[quality.untranslated_by]) || attentionWhy;
    if (quality && quality[flag].includes(i)) {
      button.classList.add(flag);
      button.title = why;
      button.setAttribute("aria-description", why);
    }
    return button;
  });
  $("source-tokens").replaceChildren(...make(aligned.source_tokens, "source"));
  $("target-tokens").replaceChildren(...make(aligned.target_tokens, "target"));
  const flagged = quality ? quality.untranslated.length + quality.ungrounded.length : 0;
  $("flag-legend").hidden = !quality;
  $("flag-count").textContent = quality
    ? `${flagged} flagged (untranslated words found by ${quality.untranslated_by || "attention"}); ` +
      `confidence ${quality.confidence === null ? "n/a" : quality.confidence.toFixed(2)}.`
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

// ------------------------------------------------------------------ downloads

function heatmapUrl(format) {
  const [source, target] = state.pair;
  const params = new URLSearchParams({ q: state.text, source, target, format, kind: state.kind,
                                       layer: String(state.layer), beam_size: String(state.beam) });
  if (state.kind === "cross") params.set("level", state.level);
  // "mean" = every head named (the cross default would be the model's alignment heads).
  const heads = state.head === "mean" ? [...Array(state.data.n_heads).keys()] : [Number(state.head)];
  for (const h of heads) params.append("head", String(h));
  return "/v1/heatmap?" + params;
}

// A link cannot carry a header: with a key, the download is fetched and saved from a blob.
async function download(event) {
  const link = event.currentTarget;
  const headers = authHeaders();
  if (!headers.Authorization) return;  // no key: the plain link works
  event.preventDefault();
  try {
    const response = await fetch(link.href, { headers });
    if (!response.ok) throw new Error((await response.json()).error || `HTTP ${response.status}`);
    const name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    const save = document.createElement("a");
    save.href = URL.createObjectURL(await response.blob());
    save.download = name ? name[1] : "heatmap";
    save.click();
    setTimeout(() => URL.revokeObjectURL(save.href), 10000);
  } catch (error) {
    setStatus(`Could not download: ${error.message}`, true);
  }
}

function updateDownloads() {
  for (const format of ["png", "svg"]) {
    const link = $(`download-${format}`);
    link.href = heatmapUrl(format);
    link.setAttribute("aria-label", `Download the ${state.kind} map as ${format.toUpperCase()}` +
      (state.data.sentences.length > 1 ? " (all sentences)" : ""));
  }
}

// ------------------------------------------------------------------ wiring

function onSelect() {
  const kind = document.querySelector('input[name="kind"]:checked').value;
  if (kind !== state.kind) {
    // A new stack: start on its most telling layer (the alignment layer, or the last).
    state.layer = kind === "cross" ? state.data.alignment_layer : layersOf(kind) - 1;
    state.kind = kind;
    state.head = defaultHead(kind);
  } else {
    state.layer = Number($("layer").value);
    state.head = $("head").value;
  }
  state.level = $("level").value;
  state.sentence = Number($("sentence").value) || 0;
  syncSelectors();
  render();
}

document.addEventListener("DOMContentLoaded", () => {
  adoptKeyFromUrl();
  loadPairs();
  for (const format of ["png", "svg"]) $(`download-${format}`).addEventListener("click", download);
  $("form").addEventListener("submit", translate);
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate(event);
  });
  for (const id of ["layer", "head", "level", "sentence"]) $(id).addEventListener("change", onSelect);
  for (const radio of document.querySelectorAll('input[name="kind"]')) radio.addEventListener("change", onSelect);
  for (const id of ["map", "source-tokens", "target-tokens"]) {
    $(id).addEventListener("mouseover", onPoint);
    $(id).addEventListener("focusin", onPoint);   // the keyboard equivalent of hovering
  }
});
