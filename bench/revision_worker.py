"""Times translations with the code of the current directory, for `bench/inference.py --revisions`.

    cd EXTRACTED_REVISION && python bench/revision_worker.py --threads 2 < requests

Loads the revision's own models/de-en (or `--bundle`, one bundle for every revision, with
`--precision`) with its own onnxruntime backend, then serves one JSON
request per stdin line, {"beam", "batch", "sources"}, with one JSON answer per line,
{"seconds" (total), "latencies" (per call), "outputs" (token ids per sentence)}. It only
imports `seq2seq.loading` and `seq2seq.core.config`, which every revision has, so one worker
script serves old and new code alike.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())  # the revision's code, not this checkout's

from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads (default 2)")
    parser.add_argument("--bundle", default="models/de-en", help="bundle to load (default: the revision's own)")
    parser.add_argument("--precision", default=None, help="its graphs to run (default: the bundle's)")
    parser.add_argument("--batch-tokens", type=int, default=0, help="the translator's token budget (default 0: none)")
    args = parser.parse_args()
    translator = load_translator(args.bundle, "onnx", threads=args.threads, precision=args.precision)
    # Without a budget the batch size under test is the only split.
    translator.max_batch_tokens = args.batch_tokens or sys.maxsize
    translator.translate_batch(["Guten Morgen!", "Das Haus ist klein."], DecodeConfig(beam_size=4))  # warm-up
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        config, sources, batch = DecodeConfig(beam_size=request["beam"]), request["sources"], request["batch"]
        latencies, outputs = [], []
        for first in range(0, len(sources), batch):
            began = time.perf_counter()
            results = translator.translate_batch(sources[first : first + batch], config)
            latencies.append(time.perf_counter() - began)
            outputs += [r.target_ids for r in results]
        print(json.dumps({"seconds": sum(latencies), "latencies": latencies, "outputs": outputs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
