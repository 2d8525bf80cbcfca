"""Corpora, cleaning, splitting and the SentencePiece tokenizer. Never imports torch."""
