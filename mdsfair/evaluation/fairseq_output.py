"""Read hypotheses and targets from a ``fairseq-generate`` log.

fairseq-generate prints, per test example ``N`` (in batch order, not in id
order)::

    S-N\\t<source>
    T-N\\t<target, post-processed and detokenized>
    H-N\\t<score>\\t<hypothesis, post-processed (--post-process)>
    D-N\\t<score>\\t<hypothesis, post-processed and detokenized>
    P-N\\t<positional scores>

mixed with log lines. :func:`read_generate_output` keeps, per id, the first
``D-`` line (the best hypothesis when ``--nbest`` > 1), or the first ``H-``
line when there is no ``D-`` line, and the ``T-`` line, sorted by id. An
id's ``H-``/``D-`` lines follow each other (``--nbest`` prints them one
after the other; a file sorted by line keeps them together too); an id whose
``S-``/``T-`` line repeats, or whose ``H-``/``D-`` lines come back after
another id's, is a second copy of the cluster and is refused, naming the id
and the lines of both copies.

A ``T-`` line is the target as the task served it, cut at the model's target
limit; ``mdsfair-rouge`` scores against the full references stored in the
data-bin unless asked for the ``T-`` lines (``--target-lines``). Ids are the
split's example indices (line numbers of ``{split}.summary.txt``, from 0).

Subword decoding, applied to every extracted hypothesis and target:

* SentencePiece: text that still holds ``\u2581`` pieces is joined exactly as
  ``fairseq.data.data_utils.post_process(text, "sentencepiece")`` does
  (drop spaces, ``\u2581`` -> space, strip);
* GPT-2 BPE: fairseq's GPT-2 dictionary holds token ids as strings, so a run
  without ``--bpe gpt2`` prints lines such as ``464 3290 318``. When the
  ``encoder.json`` and ``vocab.bpe`` paths are given, every line made only of
  integer tokens (and ``<...>`` specials) is decoded with
  ``fairseq.data.encoders.gpt2_bpe_utils.get_encoder`` as fairseq's
  ``GPT2BPE.decode`` does. Lines already decoded are left alone.
"""

import logging
import re
from typing import Dict, List, Optional, Sequence, Tuple

from mdsfair.evaluation.inputs import RougeInputError, read_lines

_GENERATE_LINE_RE = re.compile(r"^(?P<kind>[STHD])-(?P<id>\d+)\t(?P<rest>.*)$")
_HYPOTHESIS_LINE_RE = re.compile(r"^[HD]-\d+\t")
_GPT2_TOKEN_RE = re.compile(r"^(?:\d+|<[^\s<>]+>)$")
SENTENCEPIECE_SPACE = "\u2581"

logger = logging.getLogger(__name__)


def is_generate_output(lines: Sequence[str]) -> bool:
    """True if ``lines`` contain at least one ``H-<id>`` or ``D-<id>`` line."""
    return any(_HYPOTHESIS_LINE_RE.match(line) for line in lines)


def decode_sentencepiece(text: str) -> str:
    """Join SentencePiece pieces (as ``--post-process sentencepiece``)."""
    return text.replace(" ", "").replace(SENTENCEPIECE_SPACE, " ").strip()


class Gpt2Decoder:
    """Decode fairseq GPT-2 BPE id strings (``"464 3290"``) back to text.

    Args:
        encoder_json: path of GPT-2's ``encoder.json``.
        vocab_bpe: path of GPT-2's ``vocab.bpe``.
    """

    def __init__(self, encoder_json: str, vocab_bpe: str):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        self._encoder = get_encoder(encoder_json, vocab_bpe)

    @staticmethod
    def looks_encoded(text: str) -> bool:
        """True if ``text`` is a non-empty sequence of GPT-2 ids / specials."""
        tokens = text.split()
        return bool(tokens) and all(_GPT2_TOKEN_RE.match(token) for token in tokens)

    def decode(self, text: str) -> str:
        """Decode like ``fairseq.data.encoders.gpt2_bpe.GPT2BPE.decode``."""
        tokens = [token if token.startswith("<") else int(token) for token in text.split()]
        return self._encoder.decode(tokens).strip()


def decode_subwords(text: str, gpt2_decoder: Optional[Gpt2Decoder] = None) -> str:
    """Undo subword segmentation left in a generate line (see module docstring)."""
    if gpt2_decoder is not None and Gpt2Decoder.looks_encoded(text):
        return gpt2_decoder.decode(text)
    if SENTENCEPIECE_SPACE in text:
        return decode_sentencepiece(text)
    return text.strip()


def parse_generate_lines(
    lines: Sequence[str],
    gpt2_decoder: Optional[Gpt2Decoder] = None,
    source: str = "<lines>",
) -> Tuple[List[int], List[str], List[Optional[str]]]:
    """Parse fairseq-generate output lines; see :func:`read_generate_output`."""
    detokenized: Dict[int, str] = {}
    hypotheses: Dict[int, str] = {}
    targets: Dict[int, str] = {}
    first_line: Dict[Tuple[str, int], int] = {}  # (kind, id) -> its first line
    previous_id: Dict[str, int] = {}  # kind -> the id of the last line of that kind
    for number, line in enumerate(lines, start=1):
        match = _GENERATE_LINE_RE.match(line.rstrip("\r\n"))
        if match is None:
            continue
        kind, sample_id, rest = match.group("kind"), int(match.group("id")), match.group("rest")
        first = first_line.setdefault((kind, sample_id), number)
        if first != number and (kind in "ST" or previous_id.get(kind) != sample_id):
            raise RougeInputError(
                f"{source}:{number}: cluster id {sample_id} again ({kind}-{sample_id} also at line {first}): the "
                "log holds this cluster twice (two runs written to one file?), and scoring would keep one copy "
                "silently: give the log of one run"
            )
        previous_id[kind] = sample_id
        if kind == "T":
            targets.setdefault(sample_id, rest)
        elif kind in "HD":
            # "<score>\t<text>"; the text is empty for an empty hypothesis.
            fields = rest.split("\t", 1)
            text = fields[1] if len(fields) > 1 else ""
            (detokenized if kind == "D" else hypotheses).setdefault(sample_id, text)
    ids = sorted(set(detokenized) | set(hypotheses))
    if not ids:
        raise ValueError(f"{source}: no H-<id> or D-<id> lines: not fairseq-generate output")
    raw_hypotheses = [detokenized[i] if i in detokenized else hypotheses[i] for i in ids]
    if gpt2_decoder is None:
        non_empty = [text for text in raw_hypotheses if text.strip()]
        if non_empty and all(Gpt2Decoder.looks_encoded(text) for text in non_empty):
            logger.warning(
                "%s: every hypothesis is a sequence of integers, probably GPT-2 BPE ids; "
                "give the GPT-2 encoder.json and vocab.bpe paths to decode them",
                source,
            )
    hypothesis_texts = [decode_subwords(text, gpt2_decoder) for text in raw_hypotheses]
    target_texts = [decode_subwords(targets[i], gpt2_decoder) if i in targets else None for i in ids]
    return ids, hypothesis_texts, target_texts


def read_generate_output(
    path: str,
    gpt2_encoder_json: Optional[str] = None,
    gpt2_vocab_bpe: Optional[str] = None,
) -> Tuple[List[int], List[str], List[Optional[str]]]:
    """Extract hypotheses and targets from a fairseq-generate log, sorted by id.

    Args:
        path: the file fairseq-generate's stdout was written to.
        gpt2_encoder_json: GPT-2 ``encoder.json``, to decode id strings.
        gpt2_vocab_bpe: GPT-2 ``vocab.bpe``, to decode id strings.

    Returns:
        ``(ids, hypotheses, targets)``: sample ids in increasing order, the
        hypothesis per id (``D-`` preferred over ``H-``), and the target per
        id (``None`` for an id that has no ``T-`` line).
    """
    if (gpt2_encoder_json is None) != (gpt2_vocab_bpe is None):
        raise ValueError("GPT-2 decoding needs both the encoder.json and the vocab.bpe path")
    decoder = Gpt2Decoder(gpt2_encoder_json, gpt2_vocab_bpe) if gpt2_encoder_json else None
    return parse_generate_lines(read_lines(path), decoder, source=path)
