"""The cluster mode of `crossalign translate`: bulk translation on Ray Data (`--ray`).

One machine's `--workers` stop at its cores; this mode spreads the same job over a Ray
cluster (or starts a local Ray with `--ray auto`), and its output is the batch CLI's, line
for line. The pipeline, one module per step:

1. `inputs`: the driver finds the input files (a file, a directory or a glob of text, JSONL
   or Parquet shards) and cuts each into windows, the runs of lines the batch job sorts and
   batches together, and groups whole windows into shards (the unit of output and resume).
2. `run`: a Ray Data dataset of the shards still to do: each is read as its windows' raw
   bytes by a task on the driver's node (so inputs need not be on the other nodes), and
   `map_batches` sends every window through an actor pool.
3. `actor`: each actor loads the bundle once (onnxruntime, as many intra-op threads as the
   actor has CPUs) and translates a window with the batch CLI's own pipeline
   (seq2seq.cli.batch: `decode_line`, `run_windows`, `format_record`), so a bad line is a
   record with its error, never a lost window. Ray restarts a dead actor and retries its work.
4. `shards`: the driver writes each shard when all its windows are back, atomically (a
   temporary file renamed) and then its completion marker; `--resume` skips the shards whose
   marker says they are complete.

The flags live in `options`, which imports no Ray: Ray is imported only when `--ray` runs
(`run` and the actors), never by the serving path or the single-machine CLI
(tests/test_layers.py checks both).
"""
