// crossalign attention explorer: plain JavaScript, no build step, no external requests.
//
// One call to POST /v1/attention returns every map of the translation (per sentence: the
// encoder and decoder self-attention and the cross-attention of every layer and head, and
// the word/subword alignment of every cross-attention layer and head, with each head's
// statistics). Switching type, layer, head or level redraws from that answer without asking
// the server again (the one map, and the model view of every layer and head); only the
// download links go back to it (GET /v1/heatmap with the same selection). The playback asks
// POST /v1/translate/stream for the greedy decoding of the text, step by step, and replays
// its events. A link /?q=…&source=…&target=… fills the form and translates.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { data: null, text: "", pair: null, beam: 4, sentence: 0, kind: "cross", layer: 0, head: "mean",
                level: "word" };
// The API key (when the server requires one) goes in an `Authorization: Bearer` header,
// never in a URL, so it stays out of access logs and browser history. It is typed into the
// page's key field (kept for this tab only) or, for old links, given as ?api_key=..., which
// is removed from the address bar at once and taken into the field only if the tab holds no
// key yet: a link never replaces the key a user gave.
const KEY_STORE = "crossalign-api-key";
function adoptKeyFromUrl() {
  const url = new URL(location.href);
  const key = url.searchParams.get("api_key");
  if (key) {
    if (!sessionStorage.getItem(KEY_STORE)) sessionStorage.setItem(KEY_STORE, key);
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
  let glossary;
  try {
    glossary = readGlossary($("glossary").value);
  } catch (error) {
    setStatus(error.message, true);
    return;
  }
  $("go").disabled = true;
  setStatus("Translating…");
  try {
    const strict = Boolean(glossary) && $("glossary-strict").checked;
    const request = { text, source, target, beam_size: beam, ...glossaryFields(glossary, strict) };
    const response = await fetch("/v1/attention", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(request),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    Object.assign(state, { data: body, text, pair: [source, target], beam, glossary, strict, sentence: 0 });
    state.layer = state.kind === "cross" ? body.alignment_layer : layersOf(state.kind) - 1;
    state.head = defaultHead(state.kind);
    linkToText(text, source, target);
    resetPlayback();
    showResult();
    setStatus(`Translated by ${body.model} (beam ${beam}).`);
  } catch (error) {
    setStatus(`Could not translate: ${error.message}`, true);
  } finally {
    $("go").disabled = false;
  }
}

// "Gießkanne = watering can", a line each -> {"Gießkanne": "watering can"} (null when empty).
// The request fields of a glossary (none without one); strict: its terms are required.
function glossaryFields(glossary, strict) {
  if (!glossary) return {};
  return strict ? { glossary, glossary_strict: true } : { glossary };
}

function readGlossary(text) {
  const entries = text.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const cut = line.indexOf("=");
    const term = cut < 0 ? "" : line.slice(0, cut).trim();
    const translation = cut < 0 ? "" : line.slice(cut + 1).trim();
    if (!term || !translation) throw new Error(`Glossary: write each line as "term = translation", not "${line}".`);
    return [term, translation];
  });
  return entries.length ? Object.fromEntries(entries) : null;
}

// The address bar links to what is shown: /?q=…&source=…&target=… translates it again.
function linkToText(text, source, target) {
  const url = new URL(location.href);
  url.search = new URLSearchParams({ q: text, source, target }).toString();
  history.replaceState(null, "", url.pathname + url.search + url.hash);
}

// A link with ?q= fills the form (and the pair, when it names one) and translates.
async function translateFromAddress(pairsLoaded) {
  const params = new URL(location.href).searchParams;
  const text = params.get("q");
  if (!text) return;
  await pairsLoaded;
  $("text").value = text;
  const source = params.get("source");
  const target = params.get("target");
  const pair = $("pair");
  if (source && target && [...pair.options].some((o) => o.value === `${source}:${target}`)) {
    pair.value = `${source}:${target}`;
  } else if (source) {
    const first = [...pair.options].find((o) => o.value.startsWith(`${source}:`));
    if (first) pair.value = first.value;
  }
  translate();
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
  $("playback").hidden = false;
  $("sentence-field").hidden = data.sentences.length < 2;
  fillSelect($("sentence"), data.sentences.map((s, i) => [i, `${i + 1}: ${s.source}`]), state.sentence);
  showTerms(data.sentences.flatMap((s) => (s.quality && s.quality.terms) || []), $("terms"), $("terms-list"));
  syncSelectors();
  syncPlaybackSelectors();
  render();
}

// The target-term hints the model was shown (a glossary's, or its dictionary's for rare
// words) and whether the translation used each: the quality blocks' `terms`.
function showTerms(terms, box, list) {
  box.hidden = !terms.length;
  list.replaceChildren(...terms.map((term) => {
    const item = document.createElement("li");
    const status = term.used ? "used" : term.appears ? "appears, but not where the source term is" : "not used";
    item.className = `term ${term.used ? "used" : "unused"}`;
    item.dataset.used = String(term.used);
    item.textContent = `“${term.source}” → “${term.term}” (${term.origin}): ${status}`;
    return item;
  }));
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
  drawGrid($("map"), map);
  renderTokens();
  updateDownloads();
  renderHeads();
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
  grid.style.gridTemplateColumns = `auto repeat(${heads}, minmax(0, 10rem))`;
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
      const canvas = document.createElement("canvas");
      canvas.setAttribute("aria-hidden", "true");
      paintCanvas(canvas, maps.weights[l][h]);
      const caption = document.createElement("span");
      caption.className = "head-stats";
      caption.textContent = numbers.short;
      button.append(canvas, caption);
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

// A map's weights as coloured cells on a canvas (rows top to bottom), pixel-crisp.
function paintCanvas(canvas, matrix) {
  const rows = matrix.length;
  const columns = matrix[0].length;
  const scale = Math.max(1, Math.floor(96 / Math.max(rows, columns)));
  canvas.width = columns * scale;
  canvas.height = rows * scale;
  const context = canvas.getContext("2d");
  matrix.forEach((row, r) => row.forEach((weight, c) => {
    context.fillStyle = blue(weight);
    context.fillRect(c * scale, r * scale, scale, scale);
  }));
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
                                         beam_size: String(state.beam) });
    const link = $(`download-heads-${format}`);
    link.href = "/v1/heatmap?" + params;
    link.setAttribute("aria-label", `Download every ${state.kind} head as ${format.toUpperCase()}`);
  }
}

// ------------------------------------------------------------------ playback

// The greedy decoding of the text, streamed (its events kept per sentence), replayed a step at
// a time. position = the steps shown of the chosen sentence (0..its steps).
const STEP_MS = 700;
const playback = { events: null, done: false, position: 0, playing: false, timer: null, layer: 0, head: "mean",
                   controller: null };

function resetPlayback() {
  stopPlaying();
  if (playback.controller) playback.controller.abort();
  Object.assign(playback, { events: null, done: false, position: 0, controller: null });
  delete $("playback").dataset.done;
  $("play-final").hidden = true;
  for (const id of ["triangle", "rectangle", "candidates"]) $(id).replaceChildren();
  $("play-so-far").textContent = "";
  $("play-status").textContent = "";
  syncPlayButtons();
}

function syncPlaybackSelectors() {
  const data = state.data;
  playback.layer = data.alignment_layer;
  playback.head = data.alignment_heads.length === 1 ? String(data.alignment_heads[0]) : "mean";
  fillSelect($("play-layer"), [...Array(data.decoder_layers).keys()].map((l) => [l, `${l}` +
    (l === data.alignment_layer ? ", alignment layer" : "")]), playback.layer);
  fillSelect($("play-head"), [["mean", "mean of heads"], ...[...Array(data.n_heads).keys()].map((h) => [h,
    `head ${h}` + (data.alignment_heads.length === 1 && data.alignment_heads[0] === h ? ", alignment head" : "")])],
  playback.head);
}

// Server-Sent Events from a fetch body (EventSource cannot POST): calls onEvent(name, data).
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
    if (done) return;
  }
}

async function startPlayback() {
  if (!state.data) return;
  resetPlayback();
  const [source, target] = state.pair;
  const request = { text: state.text, source, target, beam_size: 1, all_heads: true,
                    ...glossaryFields(state.glossary, state.strict) };
  playback.events = { start: null, steps: {}, sentences: {}, done: null };
  playback.controller = new AbortController();
  $("play-start").disabled = true;
  $("play-status").textContent = "Decoding…";
  playback.playing = true;
  try {
    const response = await fetch("/v1/translate/stream", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(request),
      signal: playback.controller.signal,
    });
    if (!response.ok) throw new Error((await response.json()).error || `HTTP ${response.status}`);
    scheduleStep();
    await readEvents(response, onStreamEvent);
  } catch (error) {
    if (error.name !== "AbortError") {
      stopPlaying();
      $("play-status").textContent = `Could not decode: ${error.message}`;
    }
  } finally {
    $("play-start").disabled = false;
  }
}

function onStreamEvent(name, data) {
  const events = playback.events;
  if (name === "start") events.start = data;
  else if (name === "step") (events.steps[`${data.index}:${data.sentence}`] ||= []).push(data);
  else if (name === "sentence") events.sentences[`${data.index}:${data.sentence}`] = data.result;
  else if (name === "done") events.done = data;
  else if (name === "error") {
    stopPlaying();
    $("play-status").textContent = `Could not decode: ${data.error}`;
  }
  if (name === "done" || name === "error") {
    playback.done = true;
    $("playback").dataset.done = name;   // the stream has ended (for scripts: "done" or "error")
  }
  syncPlayButtons();
  if (name === "sentence" || name === "done") showStep();
}

function stepsOfSentence() {
  return (playback.events && playback.events.steps[`0:${state.sentence}`]) || [];
}

function sentenceDone() {
  return Boolean(playback.events && playback.events.sentences[`0:${state.sentence}`]);
}

function syncPlayButtons() {
  const total = stepsOfSentence().length;
  const ready = Boolean(playback.events);
  $("play-first").disabled = !ready || playback.position === 0;
  $("play-back").disabled = !ready || playback.position === 0;
  $("play-forward").disabled = !ready || playback.position >= total;
  $("play-toggle").disabled = !ready;
  $("play-toggle").textContent = playback.playing ? "❚❚ Pause" : "▶ Play";
}

function scheduleStep() {
  clearTimeout(playback.timer);
  if (!playback.playing) return;
  playback.timer = setTimeout(() => {
    const total = stepsOfSentence().length;
    if (playback.position < total) moveTo(playback.position + 1);
    if (playback.position >= total && sentenceDone()) {
      stopPlaying();
      return;
    }
    scheduleStep();
  }, playback.position === 0 ? 0 : STEP_MS);
}

function stopPlaying() {
  playback.playing = false;
  clearTimeout(playback.timer);
  syncPlayButtons();
}

function togglePlaying() {
  if (playback.playing) {
    stopPlaying();
    return;
  }
  if (playback.position >= stepsOfSentence().length && sentenceDone()) moveTo(0);
  playback.playing = true;
  syncPlayButtons();
  scheduleStep();
}

function moveTo(position) {
  playback.position = Math.max(0, Math.min(position, stepsOfSentence().length));
  showStep();
}

// The row a step shows of a (layers, heads, keys) stack: the chosen layer's head, or their mean.
function headRow(stack) {
  const perHead = stack[Math.min(playback.layer, stack.length - 1)];
  if (playback.head !== "mean") return perHead[Number(playback.head)];
  return perHead[0].map((_, k) => perHead.reduce((sum, row) => sum + row[k], 0) / perHead.length);
}

function showStep() {
  if (!playback.events || !playback.events.start) return;
  const steps = stepsOfSentence();
  const played = steps.slice(0, playback.position);
  const sentence = playback.events.start.texts[0].sentences[state.sentence];
  const inputs = played.map((step) => step.input);
  const source = [...sentence.source_tokens.map((t) => shown(t.text)), "</s>"];
  drawGrid($("triangle"), { kind: "decoder", rows: inputs, columns: inputs,
                            matrix: played.map((step) => (step.decoder ? headRow(step.decoder) : [])),
                            links: new Set() });
  drawGrid($("rectangle"), { kind: "cross", rows: inputs, columns: source,
                             matrix: played.map((step) => headRow(step.cross)), links: new Set(),
                             outputs: played.map((step) => step.token) });
  const current = played[played.length - 1];
  $("candidates").replaceChildren(...(current ? current.candidates : []).map((candidate) => {
    const item = document.createElement("li");
    item.className = "candidate" + (candidate.token === current.token ? " chosen" : "");
    const bar = Object.assign(document.createElement("span"), { className: "bar" });
    bar.style.width = `${Math.max(1, Math.round(candidate.prob * 100))}%`;
    const label = Object.assign(document.createElement("span"), { className: "candidate-label",
      textContent: `${shown(candidate.token)} ${(candidate.prob * 100).toFixed(1)}%` });
    item.append(bar, label);
    return item;
  }));
  $("play-so-far").textContent = current ? current.translation : "";
  const total = steps.length;
  const finished = sentenceDone() && playback.position === total;
  $("play-status").textContent = current
    ? `Step ${playback.position} of ${total}${sentenceDone() ? "" : "…"}: after “${shown(current.input)}” the ` +
      `model chose “${shown(current.token)}” (probability ${(current.prob * 100).toFixed(1)}%).`
    : `Ready: ${total} steps${sentenceDone() ? "" : " so far"}. Play, or step forward.`;
  showFinal(finished ? playback.events.sentences[`0:${state.sentence}`] : null);
  syncPlayButtons();
}

// At the end of a sentence: its translation as /v1/translate has it, with the quality flags.
function showFinal(result) {
  $("play-final").hidden = !result;
  if (!result) return;
  $("play-final-text").textContent = result.text;
  const quality = result.quality;
  const words = (tokens, side) => (tokens || []).map((token, i) => {
    const chip = Object.assign(document.createElement("span"), { className: "token", textContent: shown(token.text) });
    markFlag(chip, side, i, quality);
    return chip;
  });
  $("play-source-words").replaceChildren(...words(result.source_words, "source"));
  $("play-target-words").replaceChildren(...words(result.target_words, "target"));
  $("play-flags").textContent = quality
    ? `${quality.untranslated.length} source word(s) flagged untranslated, ${quality.ungrounded.length} ` +
      `translated word(s) flagged ungrounded; confidence ` +
      `${quality.confidence === null ? "n/a" : quality.confidence.toFixed(2)}.`
    : "";
}

function onPlaybackKey(event) {
  if (event.target.closest("select")) return;
  if (event.key === "ArrowRight") moveTo(playback.position + 1);
  else if (event.key === "ArrowLeft") moveTo(playback.position - 1);
  else return;
  stopPlaying();
  event.preventDefault();
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
  const sentence = Number($("sentence").value) || 0;
  const moved = sentence !== state.sentence;
  state.sentence = sentence;
  syncSelectors();
  render();
  if (moved) {
    stopPlaying();
    moveTo(0);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  adoptKeyFromUrl();
  translateFromAddress(loadPairs());
  for (const id of ["download-png", "download-svg", "download-heads-png", "download-heads-svg"]) {
    $(id).addEventListener("click", download);
  }
  $("heads").addEventListener("click", onHeadChosen);
  $("head-close").addEventListener("click", closeHead);
  $("head-detail").addEventListener("keydown", (event) => { if (event.key === "Escape") closeHead(); });
  $("play-start").addEventListener("click", startPlayback);
  $("play-toggle").addEventListener("click", togglePlaying);
  $("play-first").addEventListener("click", () => { stopPlaying(); moveTo(0); });
  $("play-back").addEventListener("click", () => { stopPlaying(); moveTo(playback.position - 1); });
  $("play-forward").addEventListener("click", () => { stopPlaying(); moveTo(playback.position + 1); });
  $("play-controls").addEventListener("keydown", onPlaybackKey);
  for (const id of ["play-layer", "play-head"]) {
    $(id).addEventListener("change", () => {
      playback.layer = Number($("play-layer").value);
      playback.head = $("play-head").value;
      showStep();
    });
  }
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
