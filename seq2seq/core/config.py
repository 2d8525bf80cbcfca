"""One config dataclass per concern, each with the only default of its settings.

`ModelConfig` travels with every checkpoint and export as `config.json`; models are only
ever built from that file, so the architecture cannot drift from the weights.
Torch-free: the serving path reads these too.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class AlignmentError(ValueError):
    """Alignment options the model cannot satisfy, or a pair that cannot be aligned (empty
    side, too long for the model). The service answers it with 400."""


LEVELS = ("word", "subword")


@dataclass(frozen=True)
class AlignmentOptions:
    """Which cross-attention to read and how: the one options type of the alignment.

    None means the model's own choice (`ModelConfig.alignment_layer` / `alignment_heads` /
    `alignment_step_shift`); `resolve` applies those defaults and validates, once.
    """

    level: str = "word"  # "word" or "subword": the map a caller asked for
    layer: int | None = None  # decoder layer; negative counts from the end
    heads: tuple[int, ...] | None = None  # heads to average; () = the mean of all heads
    step_shift: bool | None = None  # read where the target token is the decoder input
    threshold: float = 0.0  # a hard link needs at least this weight

    def resolve(self, config: ModelConfig) -> AlignmentOptions:
        """These options with the model's defaults filled in, layer 0-based; raises
        AlignmentError naming every option the model cannot satisfy."""
        layers, n_heads = config.decoder_layers, config.n_heads
        layer = config.alignment_layer if self.layer is None else self.layer
        heads = tuple(config.alignment_heads) if self.heads is None else tuple(self.heads)
        problems = []
        if self.level not in LEVELS:
            problems.append(f"level must be 'word' or 'subword', not {self.level!r}")
        if not -layers <= layer < layers:
            problems.append(
                f"layer {layer} is out of range: the model has {layers} decoder layers "
                f"(0..{layers - 1}, or negative from the end)"
            )
        if any(not 0 <= h < n_heads for h in heads):
            problems.append(f"heads {list(heads)} out of range: the model has {n_heads} heads (0..{n_heads - 1})")
        if problems:
            raise AlignmentError("; ".join(problems))
        step_shift = config.alignment_step_shift if self.step_shift is None else bool(self.step_shift)
        return AlignmentOptions(self.level, layer % layers, heads, step_shift, self.threshold)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 8000  # joint SentencePiece vocabulary, shared by both languages
    d_model: int = 256  # residual width
    n_heads: int = 4  # d_model / n_heads = 64: the head size that trains well small
    d_ff: int = 1024  # feed-forward inner width, 4 x d_model as in Vaswani et al.
    encoder_layers: int = 4  # the encoder runs once per sentence: depth is cheap there
    decoder_layers: int = 3  # decoding runs the decoder once per token: keep it shallow
    dropout: float = 0.1  # residual and embedding dropout
    attention_dropout: float = 0.0  # on attention weights; 0 keeps the alignment maps clean
    max_positions: int = 256  # longest source or target in subwords
    learned_positions: bool = False  # sinusoidal by default: extrapolates and has no weights
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    # The cross-attention that the product shows by default (Garg et al. 2019 call it the
    # alignment layer). -1 counts from the end; heads=() means the mean of all heads.
    alignment_layer: int = -2
    alignment_heads: tuple[int, ...] = ()
    # Read the default map at the step where the target token is the decoder *input*
    # (Chen et al. 2020); set by guided training with `guided_step_shift`.
    alignment_step_shift: bool = False
    source_lang: str = "de"
    target_lang: str = "en"

    def __post_init__(self) -> None:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if len({self.pad_id, self.unk_id, self.bos_id, self.eos_id}) != 4:
            problems.append("pad/unk/bos/eos ids must differ")
        if not -self.decoder_layers <= self.alignment_layer < self.decoder_layers:
            problems.append(f"alignment_layer {self.alignment_layer} outside {self.decoder_layers} decoder layers")
        if any(not 0 <= h < self.n_heads for h in self.alignment_heads):
            problems.append(f"alignment_heads {self.alignment_heads} outside 0..{self.n_heads - 1}")
        if problems:
            raise ValueError("invalid ModelConfig: " + "; ".join(problems))
        object.__setattr__(self, "alignment_heads", tuple(self.alignment_heads))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def resolved_alignment_layer(self) -> int:
        return self.alignment_layer % self.decoder_layers


@dataclass(frozen=True)
class TrainConfig:
    data_dir: str = "work/data"  # output of `crossalign data prepare`
    # The run directory (checkpoints, logs, config.json). Long runs live outside the checkout,
    # so a later session on the same machine resumes them; `~` is expanded.
    out_dir: str = "~/.cache/crossalign/runs/default"
    max_tokens: int = 6000  # tokens per batch (source + target, padded)
    max_steps: int = 20000  # optimizer steps; the run stops at the first of steps/minutes
    max_minutes: float = 0.0  # stop after this wall time (0 = no limit)
    lr: float = 1e-3  # peak learning rate
    warmup_steps: int = 1000  # linear warmup, then inverse-sqrt decay (Vaswani et al.)
    # Over the last this many of max_steps the rate falls linearly to zero (a cooldown, as in
    # warmup-stable-decay schedules); 0 = none, inverse-sqrt to the end.
    cooldown_steps: int = 0
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    betas: tuple[float, float] = (0.9, 0.98)  # AdamW betas (Vaswani et al.)
    label_smoothing: float = 0.1  # mass spread over the vocabulary (Szegedy et al.)
    clip_norm: float = 1.0  # clip the global gradient norm to this
    sentence_upsample: int = 1  # repeat sentence pairs in each epoch (phrases once)
    # Share of each epoch's target tokens taken from dictionary phrase pairs, drawn afresh
    # each epoch from the whole phrase pool (deterministic in seed and epoch), so a large
    # pool adds vocabulary without drowning the sentences; 0 = every phrase once per epoch.
    phrase_share: float = 0.0
    # Replace this fraction of source and decoder-input tokens by <unk> (word dropout,
    # Sennrich & Zhang 2019): a regulariser for small corpora; targets are never changed.
    word_dropout: float = 0.0
    valid_every: int = 1000  # steps between validation (loss + BLEU)
    valid_bleu_sentences: int = 500  # greedy-decode this many valid sentences for BLEU (-1 = all, 0 = none)
    save_every: int = 1000  # steps between checkpoints (resume points)
    keep_checkpoints: int = 5  # older checkpoints are deleted (best.pt, the best valid BLEU, is kept apart)
    average_last: int = 5  # average the last N checkpoints into the final model
    seed: int = 1  # initialisation, batch order and dropout
    threads: int = 0  # torch intra-op threads, 0 = torch's default
    # Where training runs: "cpu", "cuda" or "cuda:N". Checkpoints are device-free, so a run
    # started on a GPU resumes on the CPU and back. Validation BLEU decodes on a CPU copy.
    device: str = "cpu"
    # Forward-pass precision: "bf16" (autocast; what GPUs are fast at, and it runs on the CPU
    # too) or "fp32"; "auto" = bf16 on CUDA, fp32 on CPU. Weights, optimizer and loss stay fp32.
    precision: str = "auto"
    # Start a new run from the weights of a model directory (a release bundle or a run's
    # final/): its config.json fixes the architecture and its spm.model must be the data's;
    # dropout comes from this run's --dropout / --attention-dropout. The optimizer and the
    # schedule start afresh; "" = random initialisation.
    init_from: str = ""
    # Guided alignment (Garg et al. 2019): supervise one cross-attention head with a word
    # aligner's links while training translation. A Pharaoh file with one line per line of
    # DATA/train.tsv (export/eflomal_baseline.py --train-out); "" = off. The head is
    # `guided_head` of ModelConfig.alignment_layer, and a new run records it as the model's
    # alignment head, so the product reads the supervised head by default.
    guided_alignment: str = ""
    guided_weight: float = 0.05  # λ of Garg et al.: loss = translation + λ · alignment
    guided_head: int = 0  # which head of the alignment layer is supervised
    # Supervise the row where the target piece is the decoder *input* (the step after it
    # was produced, Chen et al. 2020) rather than the row that predicts it: the head then
    # aligns a word it has seen instead of guessing the next one. A new run records it as
    # the model's `alignment_step_shift`, so the product reads the same row.
    guided_step_shift: bool = True
    # Target-term hints (Dinu et al. 2019; seq2seq/core/hints.py): each candidate hint of a
    # training pair (DATA/hints.train.jsonl, written with the hint pieces' vocabulary by
    # `crossalign data hints`) is shown in the source with this probability; 0 = none.
    hint_rate: float = 0.0
    # Subword regularization (Kudo 2018): each batch's source and target segmentations are
    # sampled from the unigram model with this smoothing alpha (nbest -1; lower is more
    # random); 0 = the one best segmentation, as at translation time.
    subword_alpha: float = 0.0
    # R-Drop (Liang et al. 2021): each batch runs twice with independent dropout and the
    # symmetric KL divergence between the two output distributions is added with this
    # weight; 0 = off. A step then costs about twice as much.
    rdrop_alpha: float = 0.0
    # Make the batches (read, hints, padding, word dropout, guided rows) in this many worker
    # processes, ahead of the step, instead of in the training process (0): what keeps a GPU
    # busy. A worker's batch draws from its own RNG, seeded from (seed, step).
    batch_workers: int = 0
    # Size the schedule to the clock, for a run whose steps/s only the device knows (the GPU
    # round): with max_minutes, the warm-up runs on the clock for the first this many seconds,
    # then the steps/s measured fix max_steps (what fits max_minutes) and warmup_steps and
    # cooldown_steps (warmup_share of the minutes, cooldown_share of the steps); 0 = off.
    schedule_probe_s: float = 0.0
    # Train only the parameters whose names match this regular expression (re.fullmatch; e.g.
    # `decoder_layers\.1\.cross_attention\.w_[qk]\..*`, the alignment head's layer's query
    # and key projections), the rest frozen at their --init-from values: a refit of one part
    # of a model, such as the alignment head of a weight soup; "" = every parameter.
    train_only: str = ""
    warmup_share: float = 0.1  # with schedule_probe_s: the warm-up's share of max_minutes
    cooldown_share: float = 0.2  # with schedule_probe_s: the cooldown's share of the steps

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        problems = []
        if not 0.0 <= self.phrase_share < 1.0:
            problems.append(f"phrase_share {self.phrase_share} outside [0, 1)")
        if self.precision not in ("auto", "bf16", "fp32"):
            problems.append(f"precision {self.precision!r} is not auto, bf16 or fp32")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            problems.append(f"device {self.device!r} is not cpu, cuda or cuda:N")
        if not 0 <= self.cooldown_steps <= self.max_steps:
            problems.append(f"cooldown_steps {self.cooldown_steps} outside [0, max_steps {self.max_steps}]")
        if not 0.0 <= self.word_dropout < 1.0:
            problems.append(f"word_dropout {self.word_dropout} outside [0, 1)")
        if not 0.0 <= self.hint_rate <= 1.0:
            problems.append(f"hint_rate {self.hint_rate} outside [0, 1]")
        if self.subword_alpha < 0 or self.rdrop_alpha < 0:
            problems.append("subword_alpha and rdrop_alpha must be >= 0")
        if self.batch_workers < 0 or self.schedule_probe_s < 0:
            problems.append("batch_workers and schedule_probe_s must be >= 0")
        if self.train_only:
            try:
                re.compile(self.train_only)
            except re.error as error:
                problems.append(f"train_only {self.train_only!r} is no regular expression: {error}")
        if self.schedule_probe_s and not self.max_minutes:
            problems.append("schedule_probe_s sizes the schedule to max_minutes: set it too")
        if not (0.0 < self.warmup_share < 1.0 and 0.0 <= self.cooldown_share < 1.0):
            problems.append(f"warmup_share {self.warmup_share} outside (0, 1) or cooldown_share outside [0, 1)")
        if problems:
            raise ValueError("invalid TrainConfig: " + "; ".join(problems))

    @property
    def autocast_bf16(self) -> bool:
        return self.precision == "bf16" or (self.precision == "auto" and self.device.startswith("cuda"))

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir).expanduser()


RERANK_MODES = ("none", "mbr", "channel", "mbr+channel")


@dataclass(frozen=True)
class RerankOptions:
    """How a beam's n-best list is reranked (seq2seq/decoding/rerank.py); `mode` "none" keeps
    the search's order. The channel modes need the reverse direction's model
    (`Translator.channel`)."""

    mode: str = "none"
    # The candidates reranked: the search runs with a beam of at least this many and keeps them all.
    candidates: int = 8
    # λ of the channel: score + λ · log P(source | candidate) / (source pieces + 1). 2.0 was
    # chosen on the even lines of Ding valid for the shipped de-en, stage 12 (bench/rerank.py:
    # the mildest within 0.3 BLEU of the best; docs/decoding.md, reranking; stage 10's was 1.0).
    channel_weight: float = 2.0
    # The MBR weights: softmax(score / temperature) over the candidates; larger is flatter
    # (4.0 chosen the same way).
    temperature: float = 4.0

    def __post_init__(self) -> None:
        if self.mode not in RERANK_MODES:
            raise ValueError(f"unknown rerank mode {self.mode!r}: choose one of {', '.join(RERANK_MODES)}")
        if not 2 <= self.candidates <= 32:
            raise ValueError(f"rerank candidates must be 2 to 32, not {self.candidates}")
        if self.channel_weight < 0:
            raise ValueError(f"the channel weight must be >= 0, not {self.channel_weight}")
        if self.temperature <= 0:
            raise ValueError(f"the temperature must be > 0, not {self.temperature}")

    @property
    def uses_channel(self) -> bool:
        return self.mode in ("channel", "mbr+channel")

    @property
    def uses_mbr(self) -> bool:
        return self.mode in ("mbr", "mbr+channel")


# Beyond this a term would outweigh any sentence around it (a piece's log-prob rarely falls below -10).
MAX_TERM_BONUS = 10.0

# The DecodeConfig fields that decide which translation the search finds. A bundle records
# them (bundle.json `decoding`) as the defaults it was measured with and is served with; the
# others (n_best, attention, alignment, length limits) are per call.
SEARCH_FIELDS = (
    "beam_size",
    "length_penalty",
    "coverage_penalty",
    "no_repeat_ngram_size",
    "dictionary_hints",
    "hint_max_count",
    "term_bonus",
)


GlossaryTerms = tuple[tuple[str, str], ...]  # (source term, target term) pairs


@dataclass(frozen=True)
class TermOptions:
    """The target-term hints of a search and how the search favours them: the one options type
    of the terms, as `AlignmentOptions` is the map's (seq2seq/core/hints.py shows them to the
    model, seq2seq/decoding/terms.py scores the glossary's).

    None means the model's own (its bundle's `decoding`, in `DecodeConfig`); `apply` puts the
    options over a config. Validated once, here: raises ValueError naming every problem.
    """

    # The caller's terms: matched in inflected forms and shown as hints, before (and instead
    # of) any dictionary hint on the same words. A model trained without hints cannot take them.
    glossary: GlossaryTerms = ()
    dictionary_hints: bool | None = None  # rare words shown with the dictionary's translation
    term_bonus: float | None = None  # per glossary-term piece a hypothesis writes, 0..MAX_TERM_BONUS
    glossary_strict: bool = False  # a translation that ends before writing every term pays for each

    def __post_init__(self) -> None:
        object.__setattr__(self, "glossary", tuple((str(s), str(t)) for s, t in self.glossary))
        problems = []
        if any(not source.strip() or not target.strip() for source, target in self.glossary):
            problems.append("every glossary term and its translation must be a non-blank string")
        if self.term_bonus is not None and not 0 <= self.term_bonus <= MAX_TERM_BONUS:
            problems.append(f"term_bonus must be between 0 and {MAX_TERM_BONUS}, not {self.term_bonus}")
        if problems:
            raise ValueError("; ".join(problems))

    def apply(self, config: DecodeConfig) -> DecodeConfig:
        """`config` searching with these terms: the glossary and strictness as given, the hints
        and bonus where set (unset: the config's, the model's own)."""
        asked = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(config, **{name: value for name, value in asked.items() if value is not None})


@dataclass(frozen=True)
class DecodeConfig:
    """The settings of one search. Its defaults are the fallback for a model whose bundle has
    no `decoding` section; `Translator.decode_defaults` holds each model's own."""

    beam_size: int = 4
    n_best: int = 1
    # GNMT alpha: a finished score is log-prob / ((5 + len) / 6) ** alpha. 1.0 was chosen on
    # valid for the shipped model by export/release.sh (its bundle.json records it under
    # `decoding`): BLEU 9.32 -> 9.36, length ratio 0.906 -> 0.947 against alpha 0.6.
    length_penalty: float = 1.0
    # GNMT beta: plus beta * sum over source pieces of log(min(attention received, 1)), read
    # from the model's alignment head (Wu et al. 2016); 0 = off. 0.2 was tuned on valid
    # (docs/decoding.md, coverage penalty): BLEU 7.78 -> 8.10, length ratio 0.876 -> 0.948.
    coverage_penalty: float = 0.2
    # No hypothesis may produce an n-gram of target pieces it already holds (fairseq's and
    # CTranslate2's no_repeat_ngram_size, seq2seq/decoding/repeats.py); 0 = off. 4 was chosen on valid
    # for the shipped model (docs/decoding.md, repetition guard): BLEU 10.95 -> 10.99,
    # outputs with a repeated word trigram 32 -> 18; 3 stops more (3 left) but costs 0.06
    # BLEU, 2 costs 0.25.
    no_repeat_ngram_size: int = 4
    # Stop a sentence as soon as its best continuation (by summed log-prob) is EOS and n_best
    # hypotheses have finished (CTranslate2 stops so without a length penalty). The default,
    # fairseq's rule, waits for beam_size finished hypotheses, which lets a longer one win
    # under the length penalty. Measured on the shipped model (valid, its decoding): early
    # exit is 1.13-1.23x faster at beam 4 but loses 0.35 BLEU, length ratio 0.973 -> 0.885
    # (docs/performance.md, "Stopping rule"). Off by default; `translate --early-exit`.
    early_exit: bool = False
    max_length_ratio: float = 2.0  # max target length = ratio * source length + 10
    max_length_extra: int = 10
    return_attention: bool = True
    # The alignment map to build in the same pass as each translation (it needs the
    # attention); None = none.
    alignment: AlignmentOptions | None = None
    # Read shouted (all-caps) input with its case restored and answer it in capitals
    # (seq2seq/core/casing.py): the SentencePiece model cuts capitals into letters, and the model
    # then writes garbage. False = the model reads every text as given.
    restore_case: bool = True
    # Target-term hints (seq2seq/core/hints.py), for a model trained with them: each source
    # word the bundle's dictionary knows and the training sentences held at most
    # `hint_max_count` times is shown with its usual translation. A bundle records whether it
    # serves them (bundle.json `decoding`); a model without hint pieces ignores them.
    dictionary_hints: bool = False
    hint_max_count: int = 2
    # The caller's terms, (source term, target term) pairs: matched in inflected forms and
    # shown as hints, before (and instead of) any dictionary hint on the same words. Needs a
    # model trained with hints (HintError otherwise).
    glossary: GlossaryTerms = ()
    # Per piece of a glossary term that a hypothesis writes, this much is added to its score
    # (seq2seq/decoding/terms.py): the search tries the term where the model ranks it too low
    # to copy from its hint. 0: off. Chosen on valid (docs/terms.md).
    term_bonus: float = 0.0
    # The glossary as a requirement: a translation that ends before writing every glossary term
    # pays MAX_TERM_BONUS per term left out, so the search keeps going until they are in.
    # More terms reach the output, at some cost to the sentence around them (docs/terms.md).
    glossary_strict: bool = False
    # Rerank the beam's n-best (seq2seq/decoding/rerank.py): the search keeps
    # `rerank.candidates` hypotheses and the first is chosen by the reverse model as a
    # channel and/or minimum Bayes risk; None = the search's own best. Per call, never a
    # bundle's default (it costs a wider beam and a teacher-forced pass of the reverse model).
    rerank: RerankOptions | None = None
    # With an alignment: each hypothesis's quality block too (seq2seq/analysis/quality.py; in
    # the thorough mode one more teacher-forced row per source word). False: the maps alone,
    # all that placing markup on a translation reads (seq2seq/documents).
    quality: bool = True
    # In the thorough quality mode, the quality blocks' source occlusion; False: the fast mode's
    # attention-only flags for this call (the service's, for a request whose occlusion pass would
    # take it over its work bound).
    occlusion: bool = True

    def __post_init__(self) -> None:
        # The term settings are validated (and the glossary's pairs normalised) by their options type.
        object.__setattr__(self, "glossary", self.terms.glossary)
        if self.beam_size < 1 or not 1 <= self.n_best <= self.beam_size:
            raise ValueError(f"need 1 <= n_best ({self.n_best}) <= beam_size ({self.beam_size})")
        if self.coverage_penalty < 0:
            raise ValueError(f"coverage_penalty must be >= 0, not {self.coverage_penalty}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0 (0 = off), not {self.no_repeat_ngram_size}")
        if self.alignment is not None and not self.return_attention:
            raise ValueError("an alignment needs the attention: set return_attention")
        if self.hint_max_count < 0:
            raise ValueError(f"hint_max_count must be >= 0, not {self.hint_max_count}")

    @property
    def terms(self) -> TermOptions:
        """The config's term settings as the one options value (validated)."""
        return TermOptions(self.glossary, self.dictionary_hints, self.term_bonus, self.glossary_strict)

    def without_glossary(self) -> DecodeConfig:
        """This config with no glossary: what texts with their own glossaries share (a
        scheduler carries each text's glossary with it, `Translator.translate_wanted`)."""
        return dataclasses.replace(self, glossary=())

    def override(self, **asked: Any) -> DecodeConfig:
        """This config with each setting in `asked` that is set (not None) in place of its own:
        what a flag or a request field asks for, over a model's defaults, which fill the rest."""
        return dataclasses.replace(self, **{name: value for name, value in asked.items() if value is not None})

    @property
    def search_settings(self) -> dict[str, Any]:
        """The `SEARCH_FIELDS` and their values: what a bundle records, logs and /health show."""
        return {name: getattr(self, name) for name in SEARCH_FIELDS}

    def settings_text(self) -> str:
        """The search settings as `beam_size=4 length_penalty=1.0 ...`: the line logs show."""
        return " ".join(f"{name}={value}" for name, value in self.search_settings.items())


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(cls: type[T], values: dict[str, Any]) -> T:
    """Build `cls` from a dict, ignoring unknown keys (newer files) and converting lists."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names})


def save_config(config: Any, path: Path) -> None:
    Path(path).write_text(json.dumps(to_dict(config), indent=2) + "\n")


def load_config(cls: type[T], path: Path) -> T:
    return from_dict(cls, json.loads(Path(path).read_text()))


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source (trailing, or the block just above it): the
    one place a setting is explained, reused as its `--help` text."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):  # no source (e.g. a frozen build): help shows defaults only
        return {}
    comments, block = {}, []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("# "))
            continue
        match = re.match(r"(\w+)\s*:[^=]*=[^#]*(?:#\s*(.*))?$", stripped)
        if match:
            text = " ".join(block + ([match.group(2)] if match.group(2) else []))
            if text:
                comments[match.group(1)] = text
        block = []
    return comments


def dataclass_arguments(parser: Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Expose every field of `cls` as `--field-name`, with the dataclass default (one default)
    and the field's comment as help."""
    comments = field_comments(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        flag = "--" + f.name.replace("_", "-")
        about = comments.get(f.name, "").replace("%", "%%")
        shown = list(default) if isinstance(default, tuple) else default
        text = f"{about} (default {shown!r})" if about else f"(default {shown!r})"
        if isinstance(default, bool):
            parser.add_argument(
                flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default, metavar="BOOL", help=text
            )
        elif isinstance(default, tuple):
            kind = type(default[0]) if default else int
            parser.add_argument(flag, type=kind, nargs="*", default=default, help=text)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=text)


def from_arguments(cls: type[T], args: Any, **overrides: Any) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {n: getattr(args, n) for n in names if hasattr(args, n)}
    values.update(overrides)
    return cls(**values)
