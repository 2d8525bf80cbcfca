// crossalign attention explorer: the greedy decoding of the text, streamed and played back a step
// at a time. Plain JavaScript, no build step; the page's scripts share one global scope
// (explorer.js: the state, the form, the API; maps.js: one map and the word strips; heads.js: the
// model view; playback.js: the decoding played back).
"use strict";

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

// Whether the playback is the search that made the translation above: only a greedy search
// (beam 1, no rerank) has a final choice at every step to show.
function sameSearch() {
  return state.beam === 1 && state.rerank === "none";
}

// Says which search the playback shows and why, beside the translation above when they differ.
function syncPlaybackNote() {
  $("play-note").textContent = sameSearch()
    ? "This is the search that made the translation above (greedy, beam 1): the playback ends on it."
    : `This plays back a greedy search (beam 1), not the translation above (${searchName()}): only a greedy ` +
      "search makes a final choice at every step, while a beam keeps several candidates open until the " +
      "sentence ends" + (state.rerank === "none" ? "" : " and reranking then chooses among them") +
      ". The two may end differently; set the beam size to 1" + (state.rerank === "none" ? "" : " and Rerank to no") +
      " to explore the greedy translation above too.";
  $("playback").dataset.same = String(sameSearch());
}

function syncPlaybackSelectors() {
  syncPlaybackNote();
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
  const above = state.data.sentences[state.sentence].translation;
  const same = result.text === above;
  $("play-compare").textContent = sameSearch() ? "" : same
    ? `The same translation as the ${searchName()} search above.`
    : `Not the translation above: the ${searchName()} search chose “${above}”; greedy decoding wrote ` +
      `“${result.text}”.`;
  $("play-compare").hidden = sameSearch();
  $("play-compare").dataset.same = String(same);
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
      `translated word(s) flagged ungrounded; ` + confidenceText(quality)
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

document.addEventListener("DOMContentLoaded", () => {
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
});
