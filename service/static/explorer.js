// crossalign attention explorer: plain JavaScript, no build step, no external requests.
//
// One call to POST /v1/attention returns every map of the translation (per sentence: the
// encoder and decoder self-attention and the cross-attention of every layer and head, and
// the word/subword alignment of every cross-attention layer and head, with each head's
// statistics). Switching type, layer, head or level redraws from that answer without asking
// the server again (the one map, and the model view of every layer and head); only the
// download links go back to it (GET /v1/heatmap with the same selection). The playback asks
// POST /v1/translate/stream for the greedy decoding of the text, step by step, and replays
// its events. A link /?q=…&source=…&target=… fills the form and translates; the bare page
// translates its example at once, so the first screen shows a translation and its map.
//
// This file holds the state, the form and the API; the page's other scripts share its global
// scope: maps.js (one map and the word strips), heads.js (the model view), playback.js.
"use strict";

const $ = (id) => document.getElementById(id);
// pair: the [source, target] the server translated (the detected source with "auto"); rerank:
// the rerank mode asked ("none": the search's own best).
const state = { data: null, text: "", pair: null, beam: 4, rerank: "none", sentence: 0, kind: "cross", layer: 0,
                head: "mean", level: "word" };
// The served pairs ("de:en", ...), from /languages: a channel rerank needs the reverse one.
const served = new Set();
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

// The pair select: "Detect the language" (source "auto", the target the detected language's
// only one), then every served pair.
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
        served.add(option.value);
      }
    }
  } catch (error) {
    select.add(new Option("German → English", "de:en"));
  }
  syncRerank();
}

// A channel rerank reads the source back with the other direction's model: offered when that
// direction is served (with "auto", when any pair's reverse is; the server says if not).
function syncRerank() {
  const [source, target] = $("pair").value.split(":");
  const reverse = source === "auto" ? [...served].some((p) => served.has(p.split(":").reverse().join(":")))
    : served.has(`${target}:${source}`);
  for (const option of $("rerank").options) {
    option.disabled = option.value.includes("channel") && !reverse;
  }
  if ($("rerank").selectedOptions[0].disabled) $("rerank").value = "none";
}

// What the form asks: the text, the pair (source "auto": detected), the search and the terms;
// {error} for a form that cannot be sent.
function readForm() {
  const text = $("text").value.trim();
  if (!text) return { error: "Type a sentence first." };
  const [source, target] = ($("pair").value || "auto:").split(":");
  const beam = Math.max(1, Math.min(8, parseInt($("beam").value, 10) || 4));
  let glossary;
  try {
    glossary = readGlossary($("glossary").value);
  } catch (error) {
    return { error: error.message };
  }
  const strict = Boolean(glossary) && $("glossary-strict").checked;
  return { text, source, target, beam, rerank: $("rerank").value, glossary, strict };
}

// The request fields of a search: the beam, and the rerank when one is asked.
function searchFields(beam, rerank) {
  return rerank === "none" ? { beam_size: beam } : { beam_size: beam, rerank };
}

// The translation shown is the last one asked for: a request still running when a newer one
// starts is aborted, and an answer that arrives anyway is dropped (the bare page's example,
// translated once the language list has come, never replaces the reader's own).
const translations = { asked: 0, controller: null };

async function translate(event, { link = true } = {}) {
  if (event) event.preventDefault();
  const form = readForm();
  if (form.error) {
    setStatus(form.error, true);
    return;
  }
  const { text, source, target, beam, rerank, glossary, strict } = form;
  const asked = ++translations.asked;
  if (translations.controller) translations.controller.abort();
  const controller = new AbortController();
  translations.controller = controller;
  $("go").disabled = true;
  setStatus(source === "auto" ? "Detecting the language and translating…" : "Translating…");
  try {
    const request = { text, source, ...(target ? { target } : {}), ...searchFields(beam, rerank),
                      ...glossaryFields(glossary, strict) };
    const response = await fetch("/v1/attention", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(request),
      signal: controller.signal,
    });
    const body = await response.json();
    if (asked !== translations.asked) return;   // a newer translation was asked for meanwhile
    // A text the server cannot tell (or does not translate) is its 422, shown as it says it.
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    Object.assign(state, { data: body, text, pair: [body.source, body.target], beam, rerank, glossary, strict,
                           sentence: 0 });
    state.layer = state.kind === "cross" ? body.alignment_layer : layersOf(state.kind) - 1;
    state.head = defaultHead(state.kind);
    if (link) linkToText(text, source, target, rerank);
    resetPlayback();
    showResult();
    const detected = source === "auto" ? `Detected ${languageName(body.source)}; translated` : "Translated";
    setStatus(`${detected} by ${body.model} (${searchName()}).`);
  } catch (error) {
    if (asked === translations.asked) setStatus(`Could not translate: ${error.message}`, true);
  } finally {
    if (asked === translations.asked) {
      translations.controller = null;
      $("go").disabled = false;
      // Translations finished, either way (for scripts: the page is settled when it grows).
      $("result").dataset.done = String(Number($("result").dataset.done || 0) + 1);
    }
  }
}

const RERANK_NAMES = { channel: "the channel", mbr: "MBR", "mbr+channel": "MBR with the channel" };
const RERANK_CANDIDATES = 8;   // the server's default (the page sends none): the beam is widened to them

// The search that made the translation shown, in words: "beam 4", "beam 8, reranked by the channel".
function searchName() {
  const beam = state.rerank === "none" ? state.beam : Math.max(state.beam, RERANK_CANDIDATES);
  return `beam ${beam}` + (state.rerank === "none" ? "" : `, reranked by ${RERANK_NAMES[state.rerank]}`);
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

// The address bar links to what is shown: /?q=…&source=…&target=… (and &rerank=…) translates it again.
function linkToText(text, source, target, rerank) {
  const url = new URL(location.href);
  url.search = new URLSearchParams({ q: text, source, ...(target ? { target } : {}),
                                     ...(rerank !== "none" ? { rerank } : {}) }).toString();
  history.replaceState(null, "", url.pathname + url.search + url.hash);
}

// A link with ?q= fills the form (the pair and the rerank, when it names them) and translates;
// the bare page translates its example, without changing the address. Neither, once the reader
// has asked for a translation while the language list was coming.
async function translateFromAddress(pairsLoaded) {
  const params = new URL(location.href).searchParams;
  const text = params.get("q");
  await pairsLoaded;
  if (translations.asked > 0) return;
  if (!text) {
    translate(null, { link: false });
    return;
  }
  $("text").value = text;
  const source = params.get("source");
  const target = params.get("target");
  const pair = $("pair");
  if (source && [...pair.options].some((o) => o.value === `${source}:${target || ""}`)) {
    pair.value = `${source}:${target || ""}`;
  } else if (source === "auto") {
    pair.value = "auto:";
  } else if (source) {
    const first = [...pair.options].find((o) => o.value.startsWith(`${source}:`));
    if (first) pair.value = first.value;
  }
  syncRerank();
  const rerank = params.get("rerank");
  if ([...$("rerank").options].some((o) => o.value === rerank && !o.disabled)) $("rerank").value = rerank;
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
  $("model-view").hidden = false;
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
  fillSelect($("layer"), [...Array(layers).keys()].map((l) => [l, `${l} of 0–${layers - 1}` +
    (state.kind === "cross" && l === data.alignment_layer ? ", alignment" : "")]), state.layer);
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

// ------------------------------------------------------------------ downloads

// The search of the translation shown, as query parameters: a download draws that translation.
function searchParams() {
  return Object.fromEntries(Object.entries(searchFields(state.beam, state.rerank)).map(([k, v]) => [k, String(v)]));
}

function heatmapUrl(format) {
  const [source, target] = state.pair;
  const params = new URLSearchParams({ q: state.text, source, target, format, kind: state.kind,
                                       layer: String(state.layer), ...searchParams() });
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
  $("form").addEventListener("submit", translate);
  $("pair").addEventListener("change", syncRerank);
  let resizing;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => { if (state.data) { fitMap(); renderHeads(); } }, 150);
  });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate(event);
  });
  for (const id of ["layer", "head", "level", "sentence"]) $(id).addEventListener("change", onSelect);
  for (const radio of document.querySelectorAll('input[name="kind"]')) radio.addEventListener("change", onSelect);
});
