"""Language names and offline language identification (py3langid, which ships its model).

The identifier is restricted to the languages we serve plus common ones, so that French
or English sent to a German->English model is recognised as such (a clear error) instead of
being forced into one of the served languages, while rare languages cannot win on short
texts by chance. The service's `source: "auto"` and `crossalign translate --source auto`
both detect with `detect_source`, one rule. Torch-free; py3langid (the `serve` extra) is
imported when a detector is first made.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache

NAMES = {
    "ar": "Arabic",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "hu": "Hungarian",
    "it": "Italian",
    "ja": "Japanese",
    "nl": "Dutch",
    "no": "Norwegian",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}
# Below this probability a detection is a guess (short or ambiguous text).
CONFIDENT = 0.5


def language_name(code: str) -> str:
    return NAMES.get(code, code)


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # 0..1


class LanguageDetector:
    """py3langid over a fixed set of candidate languages; thread-safe."""

    def __init__(self, languages: set[str]):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self.identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.languages = sorted(set(languages) & set(self.identifier.nb_classes))
        self.identifier.set_languages(self.languages)
        self._lock = threading.Lock()  # set_languages state is shared; rank itself is pure numpy

    def rank(self, text: str, top: int = 3) -> list[Detection]:
        with self._lock:
            ranked = self.identifier.rank(text)
        return [Detection(str(code), float(p)) for code, p in ranked[:top]]


@lru_cache(maxsize=8)
def get_detector(languages: frozenset[str]) -> LanguageDetector:
    """One detector per process and language set (loading the model takes ~1 s)."""
    return LanguageDetector(set(languages) | set(NAMES))


# The text a detection reads: the first characters of the texts, joined (more adds time, not accuracy).
DETECTED_CHARS = 2000


class UnservedLanguage(ValueError):
    """The texts look like a language none of the candidates translates (`detection` says which)."""

    def __init__(self, detection: Detection):
        super().__init__(
            f"the text looks like {language_name(detection.language)} ({detection.language}, "
            f"{detection.confidence:.0%} confidence)"
        )
        self.detection = detection


def detect_source(detector: LanguageDetector, texts: list[str], sources: set[str]) -> Detection:
    """The language of `texts` among the source languages `sources` (a set of codes).

    `detector` ranks the served and common languages (`get_detector` of the served ones); a
    text that looks like one outside `sources` is refused (UnservedLanguage), unless the
    detection is a guess (below CONFIDENT) and there is a single source to take. `sources`
    must not be empty."""
    ranked = detector.rank(" ".join(texts)[:DETECTED_CHARS])
    detection = ranked[0] if ranked else Detection("", 0.0)
    if detection.language in sources:
        return detection
    if detection.confidence < CONFIDENT and len(sources) == 1:
        return Detection(next(iter(sources)), detection.confidence)  # a guess: take the only one
    raise UnservedLanguage(detection)
