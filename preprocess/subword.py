"""Subword encoders: SentencePiece (trained here) or GPT-2 BPE (BART's).

Both map a piece of text to a list of fairseq dictionary symbols (strings).
The dictionary is shared by source and target.

* SentencePiece: symbols are the pieces (``▁the``), decoded by fairseq's
  ``--post-process sentencepiece``. Training uses a shared source/target
  corpus with ``--vocab-size`` pieces (32,000 by default, as in the
  Hierarchical Transformer paper).
* GPT-2 BPE: symbols are the BPE ids written as decimal strings, exactly as
  fairseq's BART ``dict.txt`` lists them, so BART checkpoints' vocabularies
  apply. The BPE files are given by local path (no hub is reachable).

User text never becomes a control id. Every way from text to dictionary ids
(:meth:`SubwordEncoder.encode_sentences`, the one the pipeline, the hub and
the extra references use, and :meth:`SubwordEncoder.symbol_ids` for symbols
from :meth:`SubwordEncoder.encode`) goes through :func:`text_symbol_indices`:
a span that is not a known piece of the subword model (SentencePiece's
unknown spans, whose surface text may read ``</s>`` or ``<doc-sep>``; a GPT-2
token missing from ``encoder.json``) is ``<unk>``, one per span, and a piece
whose dictionary entry is a control symbol (:func:`control_indices`: fairseq's
``<s> <pad> </s> <unk>``, ``<mask>``, PRIMERA's ``<doc-sep>``) is ``<unk>`` too.
Only the pipeline writes control ids (the task's ``<s>`` / ``</s>`` /
``<doc-sep>``). Every such ``<unk>`` is counted in the data-bin report.
"""

from __future__ import annotations  # fairseq's Dictionary only in annotations: imported when used

import abc
import bisect
import itertools
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from mdsfair.data.primera_layout import DOCUMENT_SEPARATOR

if TYPE_CHECKING:
    from fairseq.data import Dictionary

SPM_MODEL_NAME = "spm.model"

#: Dictionary symbols only the pipeline writes, never text: fairseq's four
#: specials, BART's ``<mask>`` and PRIMERA's ``<doc-sep>`` (with the
#: dictionary's own special symbols, :func:`control_indices`).
CONTROL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>", DOCUMENT_SEPARATOR)


def control_indices(dictionary: Dictionary) -> np.ndarray:
    """The dictionary ids text may never become: its special symbols (the
    first ``nspecial``, ``bos`` / ``pad`` / ``eos`` / ``unk``) and every
    :data:`CONTROL_SYMBOLS` entry it holds, sorted."""
    ids = set(range(dictionary.nspecial))
    ids |= {dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()}
    ids |= {dictionary.indices[symbol] for symbol in CONTROL_SYMBOLS if symbol in dictionary.indices}
    return np.array(sorted(ids), dtype=np.int64)


def text_symbol_indices(
    dictionary: Dictionary, symbols: Sequence[str], known: Optional[Sequence[bool]] = None
) -> np.ndarray:
    """The one way from the subword symbols of text to dictionary ids.

    ``known[i]`` says whether ``symbols[i]`` is a piece the subword model
    produces (:meth:`SubwordEncoder.is_piece`; default: every symbol is one,
    for symbols read from a file). A symbol that is not, or whose entry is a
    control symbol (:func:`control_indices`), or that the dictionary lacks, is
    ``<unk>``: one ``<unk>`` per symbol, so every such span is counted."""
    unk = dictionary.unk()
    if known is None:
        known = [True] * len(symbols)
    ids = np.fromiter(
        (dictionary.index(symbol) if is_known else unk for symbol, is_known in zip(symbols, known)),
        dtype=np.int64,
        count=len(symbols),
    )
    ids[np.isin(ids, control_indices(dictionary))] = unk
    return ids


def non_space_length(text: str) -> int:
    """Characters of ``text`` that are not white space."""
    return sum(not c.isspace() for c in text)


@dataclass
class EncodedSentences:
    """Several sentences encoded in one call, as flat arrays over their symbols
    (sentences concatenated in the order given).

    ``tokens``: dictionary index of every symbol (``dictionary.index(symbol)``);
    ``lengths``: symbols per sentence; ``word_ids``: index of the whitespace
    word each symbol belongs to inside its sentence (:meth:`SubwordEncoder.word_ids`);
    ``symbol_chars``: non-space characters of each symbol's surface text (for
    aligning symbols to character offsets, e.g. spaCy tokens).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    word_ids: np.ndarray
    symbol_chars: np.ndarray


@dataclass
class _SymbolTables:
    """Per model id: dictionary index, whether it starts a word, non-space characters."""

    index: np.ndarray
    starts_word: np.ndarray
    chars: np.ndarray


def _flatten(id_lists: Sequence[Sequence[int]]) -> Tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    flat = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int64, count=int(lengths.sum()))
    return flat, lengths


def word_ids_from_starts(starts_word: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Vectorized :meth:`SubwordEncoder.word_ids` over concatenated sentences:
    the first symbol of every sentence opens word 0, every later symbol that
    starts a word opens the next one."""
    first = np.zeros(len(starts_word), dtype=bool)
    sentence_starts = (np.cumsum(lengths) - lengths)[lengths > 0]
    first[sentence_starts] = True
    opens = (starts_word | first).astype(np.int64)
    count = np.cumsum(opens)
    # count at each sentence's first symbol, spread over the sentence
    base = np.repeat(count[sentence_starts], lengths[lengths > 0])
    return count - base


class SubwordEncoder(abc.ABC):
    """Interface: ``encode(text, continues=False) -> list[str]`` and ``decode``;
    :meth:`encode_sentences` encodes many sentences at once to dictionary indices."""

    kind = ""

    @abc.abstractmethod
    def encode(self, text: str, continues: bool = False) -> List[str]:
        """Encode ``text``; ``continues`` says it follows other text in the
        same document (GPT-2 BPE then encodes the separating space)."""

    @abc.abstractmethod
    def decode(self, symbols: List[str]) -> str:
        """Turn symbols back into text."""

    @abc.abstractmethod
    def starts_word(self, symbol: str) -> bool:
        """Whether ``symbol`` begins a new whitespace-separated word."""

    @abc.abstractmethod
    def symbol_text(self, symbol: str) -> str:
        """The surface text of one symbol (word-initial space included)."""

    @abc.abstractmethod
    def is_piece(self, symbol: str) -> bool:
        """Whether ``symbol`` is a piece of the model (not the surface of an
        unknown span, not a control symbol of the model)."""

    def symbol_ids(self, symbols: Sequence[str], dictionary: Dictionary) -> np.ndarray:
        """Dictionary ids of symbols from :meth:`encode`, by
        :func:`text_symbol_indices`: never a control id."""
        return text_symbol_indices(dictionary, symbols, [self.is_piece(symbol) for symbol in symbols])

    def word_ids(self, symbols: List[str]) -> List[int]:
        """Index of the whitespace word each symbol of one sentence belongs to
        (for aligning word-level annotations, e.g. dependency arcs)."""
        ids, word = [], -1
        for i, symbol in enumerate(symbols):
            word += int(i == 0 or self.starts_word(symbol))
            ids.append(word)
        return ids

    @abc.abstractmethod
    def manifest(self) -> Dict[str, str]:
        """What the data-bin manifest records to rebuild this encoder."""

    # ------------------------------------------------ batched encoding

    @abc.abstractmethod
    def _encode_ids(self, sentences: Sequence[str], continues: Sequence[bool]) -> List[List[int]]:
        """Model ids of every sentence (the ids behind :meth:`encode`'s symbols)."""

    @abc.abstractmethod
    def _symbol_tables(self, dictionary: Dictionary) -> _SymbolTables:
        """Lookup tables over the model's ids for ``dictionary``."""

    def _patch_unknown(self, sentences, continues, flat, lengths, starts, chars) -> None:
        """Fix the word starts and characters of unknown spans, whose surface
        is not a function of the id (their token is ``<unk>`` by the tables)."""

    def encode_sentences(
        self, sentences: Sequence[str], continues: Sequence[Union[bool, str]], dictionary: Dictionary
    ) -> EncodedSentences:
        """Encode ``sentences`` in one call. ``continues[i]``: ``False`` when
        sentence ``i`` opens its text, ``True`` when it follows the sentence
        before it after one space, or the separator string itself (``""``:
        written directly after it, as a sentence after a CJK ``。``); GPT-2
        BPE encodes such a run of sentences as the one text they form
        (SentencePiece encodes every sentence as a text of its own). Equals
        encoding them one by one with :meth:`encode` (sentences that follow
        after a space), looking the symbols up with :meth:`symbol_ids` and
        taking :meth:`word_ids` per sentence."""
        cache = self.__dict__.setdefault("_tables_cache", {})
        key = id(dictionary)
        if key not in cache or cache[key][0] is not dictionary:
            cache[key] = (dictionary, self._symbol_tables(dictionary))
        tables = cache[key][1]
        flat, lengths = _flatten(self._encode_ids(sentences, continues))
        tokens = tables.index[flat]
        starts = tables.starts_word[flat]
        chars = tables.chars[flat]
        self._patch_unknown(sentences, continues, flat, lengths, starts, chars)
        return EncodedSentences(tokens, lengths, word_ids_from_starts(starts, lengths), chars)


class SentencePieceEncoder(SubwordEncoder):
    kind = "sentencepiece"

    def __init__(self, model_path: str):
        import sentencepiece as spm

        if not os.path.exists(model_path):
            raise FileNotFoundError(f"SentencePiece model not found: {model_path}")
        self.model_path = model_path
        self.processor = spm.SentencePieceProcessor(model_file=model_path)

    def encode(self, text: str, continues: bool = False) -> List[str]:
        return self.processor.encode(text, out_type=str)

    def _encode_ids(self, sentences: Sequence[str], continues: Sequence[bool]) -> List[List[int]]:
        # One C++ call for the whole batch; parallelism comes from worker processes.
        return self.processor.encode(list(sentences), out_type=int, num_threads=1)

    def _known_id(self, i: int) -> bool:
        p = self.processor
        return not (p.is_unknown(i) or p.is_control(i) or p.is_unused(i))

    def is_piece(self, symbol: str) -> bool:
        # an unknown span's surface text is no piece: piece_to_id gives the unknown id
        return self._known_id(self.processor.piece_to_id(symbol))

    def _symbol_tables(self, dictionary: Dictionary) -> _SymbolTables:
        size = self.processor.get_piece_size()
        pieces = [self.processor.id_to_piece(i) for i in range(size)]
        return _SymbolTables(
            index=text_symbol_indices(dictionary, pieces, [self._known_id(i) for i in range(size)]),
            starts_word=np.array([self.starts_word(p) for p in pieces], dtype=bool),
            chars=np.array([non_space_length(self.symbol_text(p)) for p in pieces], dtype=np.int64),
        )

    def _patch_unknown(self, sentences, continues, flat, lengths, starts, chars) -> None:
        """An unknown span comes back as the unknown id (``<unk>`` in the
        tables), but its word start and characters are those of its surface
        text, which :meth:`encode` gives: re-encode those (rare) sentences."""
        unknown = np.flatnonzero(flat == self.processor.unk_id())
        if not len(unknown):
            return
        ends = np.cumsum(lengths)
        for sentence in np.unique(np.searchsorted(ends, unknown, side="right")).tolist():
            start = int(ends[sentence] - lengths[sentence])
            symbols = self.encode(sentences[sentence])
            for position in np.flatnonzero(flat[start : ends[sentence]] == self.processor.unk_id()).tolist():
                symbol = symbols[position]
                starts[start + position] = self.starts_word(symbol)
                chars[start + position] = non_space_length(self.symbol_text(symbol))

    def decode(self, symbols: List[str]) -> str:
        return "".join(symbols).replace("\u2581", " ").strip()

    def starts_word(self, symbol: str) -> bool:
        return symbol.startswith("\u2581")

    def symbol_text(self, symbol: str) -> str:
        return symbol.replace("\u2581", " ")

    def manifest(self) -> Dict[str, str]:
        return {"type": self.kind, "model": os.path.basename(self.model_path)}

    def pieces(self) -> List[str]:
        """Every piece of the model except its control and unknown symbols."""
        p = self.processor
        return [p.id_to_piece(i) for i in range(p.get_piece_size()) if not (p.is_control(i) or p.is_unknown(i))]


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: str,
    vocab_size: int = 32000,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    seed: int = 1,
) -> str:
    """Train a SentencePiece model on ``texts`` (one sentence each).

    ``hard_vocab_limit`` is off so that small corpora get as many pieces as
    they support instead of failing; the size reached is what the model has.
    Returns the path of the ``.model`` file.
    """
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    try:
        _train(spm, texts, model_prefix, vocab_size, model_type, character_coverage, max_sentences)
    except RuntimeError as error:
        needed = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", str(error))
        if not needed:
            raise
        raise ValueError(
            f"--vocab-size {vocab_size} is below the {needed.group(2)} pieces SentencePiece needs for every "
            f"character of its training text and <unk>; give "
            f"--vocab-size {needed.group(2)} or more"
        ) from None
    return model_prefix + ".model"


def _train(spm, texts, model_prefix, vocab_size, model_type, character_coverage, max_sentences) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=model_prefix,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        hard_vocab_limit=False,
        # fairseq's Dictionary owns <s>, <pad>, </s>, <unk>; keep the ids of
        # SentencePiece's own control symbols out of the piece list.
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        unk_id=0,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )


def dictionary_from_sentencepiece(encoder: SentencePieceEncoder, padding_factor: int = 8) -> Dictionary:
    """A fairseq dictionary over every piece, in the model's order."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for piece in encoder.pieces():
        dictionary.add_symbol(piece)
    dictionary.pad_to_multiple_(padding_factor)
    return dictionary


def _separator(continues: Union[bool, str, None]) -> Optional[str]:
    """What comes between a sentence and the text before it (``continues`` of
    :meth:`SubwordEncoder.encode_sentences`): None when it opens a text."""
    if continues is None or continues is False:
        return None
    return " " if continues is True else continues


class GPT2BPEEncoder(SubwordEncoder):
    """GPT-2 byte-level BPE from local ``encoder.json`` and ``vocab.bpe``.

    A run of sentences that follow each other (``continues``) is encoded as
    the one text they form and every BPE token goes to the sentence its first
    non-space character is in: ids equal those of the whole text, as the
    checkpoint's own tokenizer gives them (with one space between sentences
    this equals encoding ``" " + sentence`` one by one, since GPT-2's
    pre-tokenizer never joins a space-preceded word to the text before it).
    A BPE token that ``encoder.json`` lacks is an unknown span (consecutive
    ones in one pre-token form one span): ``<unk>``, and the symbol
    ``<unk:SURFACE>`` from :meth:`encode`."""

    kind = "gpt2"
    UNKNOWN_SYMBOL = "<unk:{}>"

    def __init__(self, encoder_json: str, vocab_bpe: str):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        for path in (encoder_json, vocab_bpe):
            if not os.path.exists(path):
                raise FileNotFoundError(f"GPT-2 BPE file not found: {path}")
        self.encoder_json = encoder_json
        self.vocab_bpe = vocab_bpe
        self.bpe = get_encoder(encoder_json, vocab_bpe)
        # Byte-level BPE marks a leading space with the byte symbol of " ".
        self._space = self.bpe.byte_encoder[ord(" ")]
        self._word_start_ids = {str(i) for token, i in self.bpe.encoder.items() if token.startswith(self._space)}
        self._pieces = {str(i) for i in self.bpe.decoder}
        # the id of an unknown span in _encode_ids: one row after the model's ids in the tables
        self._unknown_id = max(self.bpe.decoder) + 1
        self._unknown_surfaces: List[str] = []

    def _encode_runs(
        self, sentences: Sequence[str], continues: Sequence[Union[bool, str]]
    ) -> Tuple[List[List[int]], List[str]]:
        """BPE ids per sentence (``self._unknown_id`` for an unknown span) and
        the byte-level surfaces of the unknown spans, in order."""
        bpe = self.bpe
        ids: List[List[int]] = [[] for _ in sentences]
        unknown: List[str] = []
        first = 0
        while first < len(sentences):
            last = first + 1
            while last < len(sentences) and _separator(continues[last]) is not None:
                last += 1
            text, starts = _separator(continues[first]) or "", []
            for k in range(first, last):
                if k > first:
                    text += _separator(continues[k])
                starts.append(len(text))
                text += sentences[k]
            for match in bpe.re.finditer(bpe.pat, text):
                token = match.group()
                anchor = match.start() + len(token) - len(token.lstrip())
                if anchor == match.end():  # only white space
                    anchor = match.start()
                owner = ids[first + max(bisect.bisect_right(starts, anchor) - 1, 0)]
                previous_unknown = False
                for piece in bpe.bpe("".join(bpe.byte_encoder[b] for b in token.encode("utf-8"))).split(" "):
                    piece_id = bpe.encoder.get(piece)
                    if piece_id is not None:
                        owner.append(piece_id)
                    elif previous_unknown:
                        unknown[-1] += piece
                    else:
                        owner.append(self._unknown_id)
                        unknown.append(piece)
                    previous_unknown = piece_id is None
            first = last
        return ids, unknown

    def encode(self, text: str, continues: Union[bool, str] = False) -> List[str]:
        ids, unknown = self._encode_runs([text], [continues])
        surfaces = iter(unknown)
        return [self.UNKNOWN_SYMBOL.format(next(surfaces)) if i == self._unknown_id else str(i) for i in ids[0]]

    def _encode_ids(self, sentences: Sequence[str], continues: Sequence[Union[bool, str]]) -> List[List[int]]:
        ids, self._unknown_surfaces = self._encode_runs(sentences, continues)
        return ids

    def _patch_unknown(self, sentences, continues, flat, lengths, starts, chars) -> None:
        """Word start and characters of every unknown span, from its surface."""
        positions = np.flatnonzero(flat == self._unknown_id)
        for position, surface in zip(positions.tolist(), self._unknown_surfaces):
            symbol = self.UNKNOWN_SYMBOL.format(surface)
            starts[position] = self.starts_word(symbol)
            chars[position] = non_space_length(self.symbol_text(symbol))

    def _byte_level_text(self, symbol: str) -> str:
        """A symbol's byte-level token (``Ġthe``): a known id's, or an unknown span's surface."""
        if symbol in self._pieces:
            return self.bpe.decoder[int(symbol)]
        prefix, suffix = self.UNKNOWN_SYMBOL.split("{}")
        if symbol.startswith(prefix) and symbol.endswith(suffix) and len(symbol) > len(prefix) + len(suffix):
            surface = symbol[len(prefix) : -len(suffix)]
            if all(c in self.bpe.byte_decoder for c in surface):
                return surface
        return ""

    def symbol_text(self, symbol: str) -> str:
        """The surface text of one symbol (its bytes decoded on their own)."""
        token = self._byte_level_text(symbol)
        return bytearray(self.bpe.byte_decoder[c] for c in token).decode("utf-8", errors="replace")

    def is_piece(self, symbol: str) -> bool:
        return symbol in self._pieces

    def _symbol_tables(self, dictionary: Dictionary) -> _SymbolTables:
        symbols = [str(i) for i in range(self._unknown_id)]
        known = [symbol in self._pieces for symbol in symbols] + [False]  # the last row: an unknown span
        symbols.append(self.UNKNOWN_SYMBOL.format(""))
        return _SymbolTables(
            index=text_symbol_indices(dictionary, symbols, known),
            starts_word=np.array([self.starts_word(s) for s in symbols], dtype=bool),
            chars=np.array([non_space_length(self.symbol_text(s)) for s in symbols], dtype=np.int64),
        )

    def decode(self, symbols: List[str]) -> str:
        ids = [int(s) for s in symbols if s in self._pieces]
        return self.bpe.decode(ids).strip()

    def starts_word(self, symbol: str) -> bool:
        return symbol in self._word_start_ids or (
            symbol not in self._pieces and self._byte_level_text(symbol).startswith(self._space)
        )

    def manifest(self) -> Dict[str, str]:
        return {
            "type": self.kind,
            "encoder_json": os.path.basename(self.encoder_json),
            "vocab_bpe": os.path.basename(self.vocab_bpe),
        }


def load_encoder_from_manifest(data_dir: str, subword: Dict[str, str]) -> SubwordEncoder:
    """Rebuild the encoder a data-bin directory was made with."""
    kind = subword.get("type")
    if kind == SentencePieceEncoder.kind:
        return SentencePieceEncoder(os.path.join(data_dir, subword["model"]))
    if kind == GPT2BPEEncoder.kind:
        return GPT2BPEEncoder(
            os.path.join(data_dir, subword["encoder_json"]),
            os.path.join(data_dir, subword["vocab_bpe"]),
        )
    raise ValueError(f"{data_dir}: unknown subword type {kind!r} in the manifest")
