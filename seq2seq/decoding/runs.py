"""How a batch of sentences is searched: in runs within a budget of beam rows x source pieces."""

from __future__ import annotations


def plan_runs(lengths: list[int], beams: int, budget: int) -> list[range]:
    """Cut sources sorted by length, shortest first (their `lengths` in pieces), into the
    runs a batch is searched in, one after another: each within `budget`, (longest source) x
    (sentences) x (`beams`), or a lone sentence. Returns index ranges, in order, covering all.

    As few runs as the budget allows (the count a fill from the shortest gives, which is the
    least), of even size: a fill leaves its last run whatever remains, often one long
    sentence, whose search then runs alone, a step's fixed cost for one sentence, on one
    stream while the other's core waits (docs/performance.md, lever 25). Here the longest
    sentences are taken first, each run an even share of those left, fewer where the budget says so.
    """
    fill_runs, start = 0, 0
    while start < len(lengths):
        end = start + 1
        while end < len(lengths) and lengths[end] * (end - start + 1) * beams <= budget:
            end += 1
        fill_runs, start = fill_runs + 1, end
    runs: list[range] = []
    stop = len(lengths)
    while stop > 0:
        share = -(-stop // max(1, fill_runs - len(runs)))  # an even share of those left
        fits = max(1, budget // max(1, lengths[stop - 1] * beams))
        size = min(share, fits)  # share <= stop: at least one run is left
        runs.append(range(stop - size, stop))
        stop -= size
    return runs[::-1]
