"""Greedy batching by size with fairseq's cost (a batch's size times its
longest example), serving every example exactly once."""

import numpy as np

from mdsfair.argument_types import UsageError


def batch_indices_by_size(indices, num_tokens, max_tokens=None, max_sentences=None, multiple=1, name_of=None):
    """Greedy batching with fairseq's semantics (cost of a batch = its size
    times its longest example), returning every index exactly once; an
    example longer than ``max_tokens`` is refused, named by ``name_of(index)``
    (default ``example INDEX``)."""
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else None
    multiple = max(1, multiple or 1)
    batches, start, longest = [], 0, 0
    for position in range(len(indices)):
        length = int(num_tokens[position])
        if max_tokens is not None and length > max_tokens:
            name = name_of(int(indices[position])) if name_of is not None else f"example {indices[position]}"
            raise UsageError(f"{name}: {length} tokens, more than --max-tokens {max_tokens}; raise --max-tokens")

        def overflows(size, longest_with_new):
            return size > 0 and (
                (max_tokens is not None and longest_with_new * (size + 1) > max_tokens)
                or (max_sentences is not None and size + 1 > max_sentences)
            )

        while overflows(position - start, max(longest, length)):
            size = position - start
            keep = size - size % multiple if size >= multiple else size
            batches.append(indices[start : start + keep])
            start += keep
            longest = int(num_tokens[start:position].max()) if start < position else 0
        candidate_longest = max(longest, length)
        longest = candidate_longest
    while start < len(indices):
        end = len(indices)
        if max_sentences is not None:
            end = min(end, start + max_sentences)
        if max_tokens is not None:
            running = np.maximum.accumulate(num_tokens[start:end]) * np.arange(1, end - start + 1)
            end = start + max(1, int((running <= max_tokens).sum()))
        batches.append(indices[start:end])
        start = end
    return batches
