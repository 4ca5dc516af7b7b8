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
"""
from __future__ import annotations  # fairseq's Dictionary only in annotations: imported when used

import abc
import itertools
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from fairseq.data import Dictionary

SPM_MODEL_NAME = "spm.model"


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

    def _patch_unknown(self, sentences, continues, flat, lengths, tokens, starts, chars, dictionary) -> None:
        """Fix the entries of ids whose symbol is not a function of the id alone."""

    def encode_sentences(
        self, sentences: Sequence[str], continues: Sequence[bool], dictionary: Dictionary
    ) -> EncodedSentences:
        """Encode ``sentences`` (``continues[i]`` as in :meth:`encode`) in one
        call; equals encoding them one by one with :meth:`encode`, looking the
        symbols up in ``dictionary`` and taking :meth:`word_ids` per sentence."""
        cache = self.__dict__.setdefault("_tables_cache", {})
        key = id(dictionary)
        if key not in cache or cache[key][0] is not dictionary:
            cache[key] = (dictionary, self._symbol_tables(dictionary))
        tables = cache[key][1]
        flat, lengths = _flatten(self._encode_ids(sentences, continues))
        tokens = tables.index[flat]
        starts = tables.starts_word[flat]
        chars = tables.chars[flat]
        self._patch_unknown(sentences, continues, flat, lengths, tokens, starts, chars, dictionary)
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

    def _symbol_tables(self, dictionary: Dictionary) -> _SymbolTables:
        pieces = [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]
        return _SymbolTables(
            index=np.array([dictionary.index(p) for p in pieces], dtype=np.int64),
            starts_word=np.array([self.starts_word(p) for p in pieces], dtype=bool),
            chars=np.array([non_space_length(self.symbol_text(p)) for p in pieces], dtype=np.int64),
        )

    def _patch_unknown(self, sentences, continues, flat, lengths, tokens, starts, chars, dictionary) -> None:
        """An unknown span comes back as the unknown id, but :meth:`encode` gives
        its surface text as the symbol: re-encode those (rare) sentences as text."""
        unknown = np.flatnonzero(flat == self.processor.unk_id())
        if not len(unknown):
            return
        ends = np.cumsum(lengths)
        for sentence in np.unique(np.searchsorted(ends, unknown, side="right")).tolist():
            start = int(ends[sentence] - lengths[sentence])
            symbols = self.encode(sentences[sentence], continues[sentence])
            for position in np.flatnonzero(flat[start : ends[sentence]] == self.processor.unk_id()).tolist():
                symbol = symbols[position]
                tokens[start + position] = dictionary.index(symbol)
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
        return [
            p.id_to_piece(i)
            for i in range(p.get_piece_size())
            if not (p.is_control(i) or p.is_unknown(i))
        ]


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


class GPT2BPEEncoder(SubwordEncoder):
    """GPT-2 byte-level BPE from local ``encoder.json`` and ``vocab.bpe``."""

    kind = "gpt2"

    def __init__(self, encoder_json: str, vocab_bpe: str):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        for path in (encoder_json, vocab_bpe):
            if not os.path.exists(path):
                raise FileNotFoundError(f"GPT-2 BPE file not found: {path}")
        self.encoder_json = encoder_json
        self.vocab_bpe = vocab_bpe
        self.bpe = get_encoder(encoder_json, vocab_bpe)
        # Byte-level BPE marks a leading space with the byte symbol of " ".
        space = self.bpe.byte_encoder[ord(" ")]
        self._word_start_ids = {str(i) for token, i in self.bpe.encoder.items() if token.startswith(space)}

    def encode(self, text: str, continues: bool = False) -> List[str]:
        if continues:
            text = " " + text
        return [str(i) for i in self.bpe.encode(text)]

    def _encode_ids(self, sentences: Sequence[str], continues: Sequence[bool]) -> List[List[int]]:
        return [self.bpe.encode(" " + text if more else text) for text, more in zip(sentences, continues)]

    def symbol_text(self, symbol: str) -> str:
        """The surface text of one symbol (its bytes decoded on their own)."""
        if not (symbol.isdigit() and int(symbol) in self.bpe.decoder):
            return ""
        token = self.bpe.decoder[int(symbol)]
        return bytearray(self.bpe.byte_decoder[c] for c in token).decode("utf-8", errors="replace")

    def _symbol_tables(self, dictionary: Dictionary) -> _SymbolTables:
        symbols = [str(i) for i in range(max(self.bpe.decoder) + 1)]
        return _SymbolTables(
            index=np.array([dictionary.index(s) for s in symbols], dtype=np.int64),
            starts_word=np.array([self.starts_word(s) for s in symbols], dtype=bool),
            chars=np.array([non_space_length(self.symbol_text(s)) for s in symbols], dtype=np.int64),
        )

    def decode(self, symbols: List[str]) -> str:
        ids = [int(s) for s in symbols if s.isdigit()]
        return self.bpe.decode(ids).strip()

    def starts_word(self, symbol: str) -> bool:
        return symbol in self._word_start_ids

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


def check_dictionary_covers(dictionary: Dictionary, symbols: Iterable[str], source: Optional[str] = None) -> None:
    """Fail early when a given ``dict.txt`` cannot represent the BPE symbols."""
    missing = [s for s in symbols if s not in dictionary.indices]
    if missing:
        where = f" ({source})" if source else ""
        raise ValueError(
            f"{len(missing)} BPE symbols are not in the dictionary{where}, e.g. {missing[:5]}; "
            "give the dict.txt that belongs to these encoder.json / vocab.bpe files"
        )
