"""Search settings fairseq accepts but cannot carry out on multi-document
summarization, refused before any model loads, and the reference prefixes
of ``--prefix-size`` kept within their summaries.

* ``--sampling`` with ``--beam B > 1``: fairseq samples ``B`` hypotheses per
  source (``fairseq/search.py``, ``Sampling``) and ``fairseq-generate``
  prints all of them, so it asserts ``--nbest == --beam``; the flags are
  checked here with that reason instead of an ``AssertionError``.
* ``--match-source-len``: fairseq's length-preserving search (every output
  exactly as long as its source, for tasks such as grammatical error
  correction) sets the length limit to the source length, past the decoder's
  position table when the source is a cluster of documents (an
  ``IndexError`` in the position embedding). A summary is not as long as its
  documents, so the flag is refused; ``--max-len-a`` / ``--max-len-b`` set a
  summary's length.
* ``--prefix-size N``: ``fairseq-generate`` forces the first ``N`` tokens of
  each reference summary. A summary shorter than that (a test cluster with
  an empty summary: only ``</s>``) puts ``</s>`` into the prefix; fairseq's
  search then ends one hypothesis at that step and leaves the other beams at
  a score of ``-inf``, which can never finish, so the search runs into its
  length limit (fairseq's ``assert step < max_len``, mdsfair's static
  generator's "ran past its length limit"). :func:`prefix_within_summaries`
  keeps such a prefix to the summary's own tokens (the rest of the prefix is
  left free, as fairseq leaves padding) and names the clusters in a warning:
  their hypotheses start with the whole summary and continue as the model
  decides.
"""

import logging
from typing import Optional, Sequence

from torch import Tensor

logger = logging.getLogger(__name__)


def search_flags_refusal(
    sampling: bool, beam: Optional[int], nbest: Optional[int], match_source_len: bool
) -> Optional[str]:
    """Why these search flags cannot work (see the module docstring), or
    None. ``nbest`` None: not a ``fairseq-generate`` run (the hub returns the
    best sample itself)."""
    if match_source_len:
        return (
            "--match-source-len makes every output exactly as long as its source (fairseq's length-preserving "
            "search), and a cluster's documents are longer than a summary and often than the decoder's position "
            "table: generate without it and set the summary length with --max-len-a / --max-len-b"
        )
    if sampling and nbest is not None and beam is not None and int(beam) != int(nbest):
        return (
            f"--sampling with --beam {beam} draws {beam} samples per cluster and fairseq-generate prints every one "
            f"of them: give --nbest {beam} with it, or --beam 1 for one sample per cluster (--nbest is {nbest})"
        )
    return None


def prefix_within_summaries(
    prefix_tokens: Tensor, eos: int, pad: int, ids: Optional[Sequence[int]] = None, prefix_size: Optional[int] = None
) -> Tensor:
    """``prefix_tokens`` (the references' first tokens, ``fairseq-generate
    --prefix-size``) with ``</s>`` and everything after it replaced by
    padding, which fairseq's search leaves free; the clusters whose summary
    is shorter than the prefix (``ids``: their dataset ids, as
    ``fairseq-generate`` prints them) are named in one warning."""
    ended = prefix_tokens.eq(eos).cumsum(dim=1).gt(0)
    if not bool(ended.any()):
        return prefix_tokens
    shorter = ended.any(dim=1).nonzero().view(-1).tolist()
    named = [int(ids[i]) for i in shorter] if ids is not None else shorter
    logger.warning(
        "%d cluster(s) (S-%s) have a summary shorter than --prefix-size %s: the prefix is the whole summary and the "
        "hypothesis continues from it",
        len(shorter),
        ", S-".join(map(str, named)),
        prefix_size if prefix_size is not None else prefix_tokens.size(1),
    )
    return prefix_tokens.masked_fill(ended, pad)
