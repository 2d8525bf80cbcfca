"""One module per document format, each a reader `(bytes, Limits) -> Document` with its
document type; `limits` holds what they share (the errors, `Limits`, the checked ZIP and
UTF-8 readers). The table of formats is `seq2seq.documents.files.FORMATS`.
"""
