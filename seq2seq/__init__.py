"""Model, training, search and alignment. Import submodules explicitly: `seq2seq.search`
and `seq2seq.alignment` are torch-free so the onnxruntime serving path can use them."""
