"""Raw cluster -> model inputs: the one encoding pipeline of mdsfair.

``mdsfair-preprocess`` (its worker processes) and the hub interface
(:mod:`mdsfair.hub_interface`) both turn raw clusters into
:class:`EncodedCluster` objects through :class:`ClusterEncoder`, so what a
model sees at inference can never drift from what it was trained on:

1. **structure**: the raw JSON line is validated, cleaned and split into
   documents, paragraphs and sentences (:func:`mdsfair.preprocess.structure.parse_cluster`),
   with the title as an extra first document under ``--title-document``
   (:func:`prepend_title_document`);
2. **subwords**: every sentence of the cluster (source and summary) is encoded
   in one batched call of the subword model and looked up in the dictionary
   through precomputed tables (:meth:`SubwordEncoder.encode_sentences`);
3. **side data**: the producers the data-bin lists compute their arrays
   (:mod:`mdsfair.preprocess.side_data`).

A :class:`ClusterEncoder` is built from the command's configuration
(:class:`mdsfair.preprocess.config.PreprocessConfig`, parsed by
``mdsfair-preprocess``) or from a data-bin's manifest
(:meth:`ClusterEncoder.from_data_bin`, which constructs that configuration
with :func:`preprocessing_args`). It counts the CPU seconds it spends per stage in
:attr:`ClusterEncoder.stage_seconds` (for the benchmark and progress report).
"""

from __future__ import annotations  # fairseq's Dictionary only in annotations: imported when used

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from mdsfair.data.manifest import MANIFEST_NAME, default_text_normalization, recorded_text_normalization
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, import_producers, producer_defaults
from mdsfair.preprocess.spacy_pipeline import gemm_setting
from mdsfair.preprocess.structure import ClusterStructure, InputFormatError, SentenceSplitter, parse_cluster
from mdsfair.preprocess.subword import SubwordEncoder, load_encoder_from_manifest
from mdsfair.raw_contract import WRONG_TYPE, contract_string_problem

if TYPE_CHECKING:
    from fairseq.data import Dictionary

# A raw cluster as the hub takes it: a list of document strings, or a dict of
# the raw contract (``{"documents": [...], "title": ...}``, ``id`` and
# ``summary`` optional).
RawCluster = Union[Sequence[str], Dict[str, Any]]


@dataclass
class EncodedCluster:
    """A cluster's source as a flat token stream with aligned structure.

    ``doc_ids``, ``para_ids`` and ``sent_ids`` give, for every source token,
    the index of its document, paragraph and sentence; ``word_ids`` the index
    of its whitespace-separated word inside its sentence and ``symbol_chars``
    the number of non-space characters of its surface text (for aligning
    word-level annotations such as dependency arcs to subwords).
    ``num_words`` counts the whitespace words of the cleaned source sentences.
    ``references`` holds every cleaned reference (the first is ``summary``),
    ``dropped_documents`` the raw indices of the empty documents dropped under
    ``--skip-bad``, ``line`` the raw line the cluster was read from (set
    by ``mdsfair-preprocess``; 0 elsewhere) and ``bidi_controls_removed`` how
    many bidirectional-text controls the ``clean`` normalisation removed
    (:data:`mdsfair.preprocess.structure.BIDI_CONTROLS`).
    """

    id: str
    tokens: np.ndarray
    doc_ids: np.ndarray
    para_ids: np.ndarray
    sent_ids: np.ndarray
    word_ids: np.ndarray
    symbol_chars: np.ndarray
    target: np.ndarray
    summary: str
    num_documents: int
    num_paragraphs: int
    num_sentences: int
    num_unknown: int = 0
    num_words: int = 0
    side_data: Dict[str, np.ndarray] = field(default_factory=dict)
    references: List[str] = field(default_factory=list)  # all references, the first = summary
    dropped_documents: List[int] = field(default_factory=list)  # raw indices of dropped empty documents
    line: int = 0  # the raw line it was read from
    bidi_controls_removed: int = 0


def encode_cluster(cluster: ClusterStructure, encoder: SubwordEncoder, dictionary: Dictionary) -> EncodedCluster:
    """Subword-encode a cluster's structure: every sentence separately (so each
    token keeps its document, paragraph and sentence), all sentences of the
    cluster and its summary in one batched call.

    A sentence continues the text before it in its document (GPT-2 BPE then
    encodes the run as one text, the sentences one space apart) unless it
    opens the document; summary sentences continue each other. A sentence the
    structure marks as glued (``ClusterStructure.glued``, the ``whitespace``
    normalisation: written with no space after the one before it) follows it
    with no space between.
    """
    sentences: List[str] = []
    continues: List[Union[bool, str]] = []
    sentence_document: List[int] = []
    sentence_paragraph: List[int] = []
    paragraph_index = 0
    for d, document in enumerate(cluster.documents):
        first_in_document = True
        for p, paragraph in enumerate(document):
            for s, sentence in enumerate(paragraph):
                sentences.append(sentence)
                continues.append(False if first_in_document else "" if (d, p, s) in cluster.glued else True)
                first_in_document = False
                sentence_document.append(d)
                sentence_paragraph.append(paragraph_index)
            paragraph_index += 1
    num_source = len(sentences)
    summary = cluster.summary_sentences
    summary_continues = [i > 0 and ("" if i in cluster.summary_glued else True) for i in range(len(summary))]
    encoded = encoder.encode_sentences(sentences + list(summary), continues + summary_continues, dictionary)
    source_length = int(encoded.lengths[:num_source].sum())
    source_lengths = encoded.lengths[:num_source]
    tokens = encoded.tokens[:source_length]
    target = encoded.tokens[source_length:]
    unk = dictionary.unk()
    return EncodedCluster(
        id=cluster.id,
        tokens=tokens,
        doc_ids=np.repeat(np.asarray(sentence_document, dtype=np.int64), source_lengths),
        para_ids=np.repeat(np.asarray(sentence_paragraph, dtype=np.int64), source_lengths),
        sent_ids=np.repeat(np.arange(num_source, dtype=np.int64), source_lengths),
        word_ids=encoded.word_ids[:source_length],
        symbol_chars=encoded.symbol_chars[:source_length],
        target=target,
        summary=cluster.summary,
        num_documents=len(cluster.documents),
        num_paragraphs=paragraph_index,
        num_sentences=num_source,
        num_unknown=int((tokens == unk).sum()) + int((target == unk).sum()),
        # sentences are single-space separated after cleaning
        num_words=sum(s.count(" ") for s in sentences) + num_source,
        references=list(cluster.references),
        dropped_documents=list(cluster.dropped_documents),
        bidi_controls_removed=cluster.bidi_controls_removed,
    )


def prepend_title_document(cluster: ClusterStructure, path: str, line: int) -> ClusterStructure:
    """The cluster with its title as an extra first document of one paragraph
    of one sentence (``--title-document``); the other documents, paragraphs
    and sentences move up by one. A cluster without a title is an error."""
    title = " ".join((cluster.title or "").split())
    if not title:
        raise InputFormatError(
            path, line, "missing_key", f"cluster {cluster.id!r} has no 'title', which --title-document needs"
        )
    return replace(
        cluster, documents=[[[title]]] + cluster.documents, glued=frozenset((d + 1, p, s) for d, p, s in cluster.glued)
    )


def preprocessing_args(manifest: Dict, data_dir: str, overrides: Optional[Dict[str, Any]] = None) -> PreprocessConfig:
    """The configuration ``mdsfair-preprocess`` ran with, as far as encoding
    needs it, constructed directly: the command's defaults
    (:class:`PreprocessConfig`), every listed side-data producer's flag
    defaults, the manifest's ``sentence_splitter`` / ``lowercase`` /
    ``title_document`` / ``text_normalization`` / ``side_data`` / subword files
    (inside ``data_dir``) and recorded ``side_data_args``, then ``overrides``."""
    import_producers()
    side_data = list(manifest.get("side_data", {}))
    unknown = [name for name in side_data if name not in SIDE_DATA_PRODUCERS]
    if unknown:
        raise ValueError(
            f"{data_dir}: the manifest lists side data {unknown} that no installed producer computes "
            f"(available: {sorted(SIDE_DATA_PRODUCERS)})"
        )
    subword = manifest.get("subword", {})
    in_data_dir = lambda key: os.path.join(data_dir, subword[key]) if key in subword else None  # noqa: E731
    config = PreprocessConfig(
        destdir=data_dir,
        sentence_splitter=manifest.get("sentence_splitter", "rule"),
        lowercase=bool(manifest.get("lowercase", False)),
        title_document=bool(manifest.get("title_document", False)),
        # what the data-bin's text was normalised with (clean when it records none: made before the entry)
        text_normalization=recorded_text_normalization(manifest, os.path.join(data_dir, MANIFEST_NAME)),
        side_data=side_data,
        skip_bad=False,
        spm_model=in_data_dir("model"),
        gpt2_encoder_json=in_data_dir("encoder_json"),
        gpt2_vocab_bpe=in_data_dir("vocab_bpe"),
        dict=os.path.join(data_dir, manifest.get("dictionary", "dict.txt")),
        # every registered producer's flags, as the command has them; the listed producers' defaults win
        # (producers of one family share their flags: dep_head / dep_rel / dep_word)
        producer_args={**producer_defaults(list(SIDE_DATA_PRODUCERS)), **producer_defaults(side_data)},
    )
    if "type" in subword:
        config.subword = subword["type"]
    return config.updated(manifest.get("side_data_args", {})).updated(overrides or {})


class ClusterEncoder:
    """Raw cluster -> :class:`EncodedCluster` with the pipeline of a data-bin:
    structure, subwords, side data.

    Args:
        args: the preprocessing configuration (``sentence_splitter``,
            ``lowercase``, ``title_document``, ``skip_bad``, ``side_data`` and the producers' flags).
        data_dir: the data-bin directory holding the subword model files.
        subword_manifest: the manifest's ``subword`` entry.
        dictionary: the shared dictionary (default: ``data_dir/dict.txt``).
    """

    def __init__(
        self,
        args: PreprocessConfig,
        data_dir: str,
        subword_manifest: Dict[str, str],
        dictionary: Optional[Dictionary] = None,
    ):
        self.args = args
        #: how raw text is normalised (the data-bin's ``text_normalization``; the command's default when unset)
        self.text_normalization = getattr(args, "text_normalization", None) or default_text_normalization(
            subword_manifest.get("type")
        )
        self.splitter = SentenceSplitter(args.sentence_splitter, gemm=gemm_setting(args))
        self.subword = load_encoder_from_manifest(data_dir, subword_manifest)
        if dictionary is None:
            from fairseq.data import Dictionary

            dictionary = Dictionary.load(os.path.join(data_dir, "dict.txt"))
        self.dictionary = dictionary
        import_producers()
        self.producers = [SIDE_DATA_PRODUCERS[name](args) for name in args.side_data]
        self.stage_seconds: Counter = Counter()

    @classmethod
    def from_data_bin(
        cls,
        data_dir: str,
        manifest: Dict,
        dictionary: Optional[Dictionary] = None,
        sentence_splitter: Optional[str] = None,
        side_data_args: Optional[Dict[str, Any]] = None,
    ) -> "ClusterEncoder":
        """The encoder ``mdsfair-preprocess`` used for ``data_dir`` (its
        manifest ``mdsfair.json``), with the splitter or producer flags
        optionally overridden (``{"graph_threshold": 0.1}``)."""
        args = preprocessing_args(manifest, data_dir, side_data_args)
        if sentence_splitter:
            args.sentence_splitter = sentence_splitter
        return cls(args, data_dir, manifest["subword"], dictionary)

    # ------------------------------------------------------- the stages

    def encode_structure(self, structure: ClusterStructure) -> EncodedCluster:
        """Subwords and side data of a split cluster."""
        start = time.process_time()
        encoded = encode_cluster(structure, self.subword, self.dictionary)
        middle = time.process_time()
        for producer in self.producers:
            encoded.side_data[producer.spec.name] = np.asarray(producer(structure, encoded))
        self.stage_seconds["subwords"] += middle - start
        self.stage_seconds["side_data"] += time.process_time() - middle
        return encoded

    def expect(self, structures: Sequence[ClusterStructure]) -> None:
        """Tell the producers which clusters :meth:`encode_structure` gets
        next, in order, so a producer can prepare them as one batch (the
        dependency parser parses all their sentences as one spaCy stream)."""
        for producer in self.producers:
            expect = getattr(producer, "expect", None)  # optional for producers not derived from SideDataProducer
            if expect is not None:
                expect(structures)

    def encode_raw(self, raw: bytes, path: str, line: int, require_summary: bool) -> Tuple[EncodedCluster, int]:
        """One raw JSON line -> ``(EncodedCluster, empty documents dropped)``;
        raises :class:`InputFormatError` naming ``path`` and ``line``."""
        structure, dropped = self.structure_raw(raw, path, line, require_summary)
        return self.encode_structure(structure), dropped

    def encode_raw_lines(
        self, lines: Iterable[Tuple[int, bytes]], path: str, require_summary: bool
    ) -> Iterator[Tuple[int, Union[Tuple[EncodedCluster, int], InputFormatError]]]:
        """:meth:`encode_raw` for a chunk of ``(line number, raw line)``, in
        order, each cluster yielded as soon as it is encoded (an invalid line
        yields its :class:`InputFormatError`). Every line is split into its
        structure first (cheap), then the producers are told which clusters
        follow (:meth:`expect`): the chunk's sentences are parsed as one
        stream instead of one short ``nlp.pipe`` per cluster."""
        structures: List[Tuple[int, Union[Tuple[ClusterStructure, int], InputFormatError]]] = []
        for line_number, raw in lines:
            try:
                structures.append((line_number, self.structure_raw(raw, path, line_number, require_summary)))
            except InputFormatError as e:
                structures.append((line_number, e))
        self.expect([item[0] for _, item in structures if not isinstance(item, InputFormatError)])
        for line_number, item in structures:
            if isinstance(item, InputFormatError):
                yield line_number, item
            else:
                structure, dropped = item
                yield line_number, (self.encode_structure(structure), dropped)

    def structure_raw(self, raw: bytes, path: str, line: int, require_summary: bool) -> Tuple[ClusterStructure, int]:
        """One raw JSON line -> ``(ClusterStructure, empty documents dropped)``;
        raises :class:`InputFormatError` naming ``path`` and ``line``."""
        start = time.process_time()
        try:
            structure, dropped = parse_cluster(
                raw,
                path,
                line,
                self.splitter,
                require_summary=require_summary,
                drop_empty_documents=self.args.skip_bad,
                lowercase=self.args.lowercase,
                normalization=self.text_normalization,
            )
            if getattr(self.args, "title_document", False):
                structure = prepend_title_document(structure, path, line)
        finally:
            self.stage_seconds["structure"] += time.process_time() - start
        return structure, dropped

    # ------------------------------------------------ the hub's inputs

    def structure(self, cluster: RawCluster, index: int = 0) -> ClusterStructure:
        """Validate and split one raw cluster: a list of document strings
        (paragraphs separated by blank lines) or a dict of the raw contract
        (``{"documents": [...], "title": ...}``; ``id`` and ``summary`` optional)."""
        where = "<summarize input>"
        if isinstance(cluster, dict):
            if "documents" not in cluster:
                raise InputFormatError(where, index + 1, "missing_key", f"cluster {index} has no 'documents' key")
            record = {"summary": "", **cluster, "id": cluster.get("id", str(index))}  # its type checked below
        elif isinstance(cluster, (str, bytes)):
            raise TypeError(
                f"cluster {index} is {'a string' if isinstance(cluster, str) else 'bytes'}; pass a list of clusters, "
                "each a list of document strings or a dict with 'documents'"
            )
        else:
            try:
                documents = list(cluster)
            except TypeError:
                raise TypeError(
                    f"cluster {index} is {type(cluster).__name__}; pass a list of clusters, each a list of document "
                    "strings or a dict with 'documents'"
                ) from None
            record = {"id": str(index), "documents": documents, "summary": ""}
        documents = record["documents"]
        if not isinstance(documents, (list, tuple)) or isinstance(documents, str):
            raise InputFormatError(
                where,
                index + 1,
                WRONG_TYPE,
                f"cluster {index}: 'documents' is {type(documents).__name__}, not a list of document strings",
            )
        for d, document in enumerate(documents):
            if not isinstance(document, str):
                hint = " (decode bytes to str first)" if isinstance(document, (bytes, bytearray)) else ""
                raise InputFormatError(
                    where,
                    index + 1,
                    WRONG_TYPE,
                    f"cluster {index}: document {d} is {type(document).__name__}, not a string{hint}",
                )
        for key in ("summary", "title"):
            if not isinstance(record.get(key, ""), str) and not (key == "title" and record[key] is None):
                raise InputFormatError(
                    where,
                    index + 1,
                    WRONG_TYPE,
                    f"cluster {index}: {key!r} is {type(record[key]).__name__}, not a string",
                )
        record["documents"] = list(documents)
        problem = contract_string_problem(record)
        if problem is not None:
            raise InputFormatError(where, index + 1, *problem)
        try:
            raw = json.dumps(record, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as error:  # a value JSON cannot hold (bytes, a set) in another key
            raise InputFormatError(where, index + 1, WRONG_TYPE, f"cluster {index}: {error}") from None
        structure, _ = parse_cluster(
            raw,
            where,
            index + 1,
            self.splitter,
            require_summary=False,
            drop_empty_documents=False,
            lowercase=self.args.lowercase,
            normalization=self.text_normalization,
        )
        if getattr(self.args, "title_document", False):
            structure = prepend_title_document(structure, where, index + 1)
        return structure

    def encode(self, cluster: RawCluster, index: int = 0) -> EncodedCluster:
        """The stored form of a raw cluster, exactly as ``mdsfair-preprocess``
        writes it (no summary needed; empty documents are an error)."""
        return self.encode_structure(self.structure(cluster, index))

    def decode(self, symbols: List[str]) -> str:
        """Subword symbols -> text."""
        return self.subword.decode(symbols)
