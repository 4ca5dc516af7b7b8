"""The subword model and ``dict.txt`` of a data-bin (``mdsfair-preprocess``).

With ``--subword sentencepiece`` the model is trained on the paragraphs and
training references of ``--spm-train-split`` (:func:`training_texts`), in a
child process, or ``--spm-model`` is copied; ``dict.txt`` is built from its
pieces, or a given ``--dict`` is checked to hold every piece
(:func:`check_sentencepiece_dictionary`). With ``--subword gpt2`` the
``encoder.json`` / ``vocab.bpe`` files and ``--dict`` are copied.
"""

from __future__ import annotations  # fairseq's Dictionary only in annotations: imported when used

import logging
import os
from typing import TYPE_CHECKING, Dict, Iterator, Tuple

from mdsfair.preprocess.accounting import check_training_split_has_a_cluster, sentencepiece_size_report
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.destdir import copy_into
from mdsfair.preprocess.references import training_references
from mdsfair.preprocess.structure import InputFormatError, clean_text, iter_raw_lines, split_paragraphs
from mdsfair.preprocess.subword import (
    SPM_MODEL_NAME,
    GPT2BPEEncoder,
    SentencePieceEncoder,
    SubwordEncoder,
    dictionary_from_sentencepiece,
    train_sentencepiece,
)
from mdsfair.preprocess.worker_pool import call_in_child
from mdsfair.raw_contract import cluster_references, decode_cluster_line

if TYPE_CHECKING:
    from fairseq.data import Dictionary

logger = logging.getLogger("mdsfair.preprocess")


def training_texts(path: str, lowercase: bool, multi_reference: str = "first") -> Iterator[str]:
    """Paragraphs and the training references of the training split, for
    SentencePiece, of the lines the raw contract accepts
    (:func:`mdsfair.raw_contract.decode_cluster_line`: valid JSON of the right
    types, no lone surrogate, which SentencePiece's C++ code cannot take: it
    failed with a pybind11 traceback). A refused line is left out here and
    reported with file and line by the binarization pass (skipped and
    counted with ``--skip-bad``); this generator runs inside SentencePiece's
    trainer, which would turn an exception raised here into its own."""
    for line_number, raw in iter_raw_lines(path):
        try:
            obj = decode_cluster_line(raw, path, line_number, require_references=False)
        except InputFormatError:
            continue
        summaries = [clean_text(s, lowercase) for s in training_references(cluster_references(obj), multi_reference)]
        for document in obj["documents"]:
            yield from split_paragraphs(clean_text(document, lowercase))
        yield from summaries


def prepare_subwords(args: PreprocessConfig, splits: Dict[str, str]) -> Dict[str, str]:
    """Train or copy the subword model and write ``dict.txt`` into
    ``args.destdir``; returns the subword manifest."""
    if args.subword == "sentencepiece":
        encoder, dictionary = prepare_sentencepiece(args, splits)
    else:
        encoder, dictionary = prepare_gpt2_bpe(args)
    dictionary.save(os.path.join(args.destdir, "dict.txt"))
    return encoder.manifest()


def prepare_sentencepiece(args: PreprocessConfig, splits: Dict[str, str]) -> Tuple[SentencePieceEncoder, Dictionary]:
    """The SentencePiece model in ``args.destdir`` (copied from
    ``--spm-model`` or trained) and its dictionary (``--dict``, checked, or
    one entry per piece). A trained model's real size goes to
    ``args.vocabulary_report``."""
    from fairseq.data import Dictionary

    spm_path = os.path.join(args.destdir, SPM_MODEL_NAME)
    if args.spm_model:
        copy_into(args.spm_model, spm_path)
    else:
        train_sentencepiece_model(args, splits)
    encoder = SentencePieceEncoder(spm_path)
    if args.dict:
        dictionary = Dictionary.load(args.dict)
        check_sentencepiece_dictionary(encoder, dictionary, args.dict)
    else:
        dictionary = dictionary_from_sentencepiece(encoder)
    if not args.spm_model:
        args.vocabulary_report = sentencepiece_size_report(
            args.vocab_size, encoder.processor.get_piece_size(), len(dictionary)
        )
    return encoder, dictionary


def train_sentencepiece_model(args: PreprocessConfig, splits: Dict[str, str]) -> None:
    """Train ``spm.model`` in ``args.destdir`` on ``--spm-train-split``
    (:func:`training_texts`), in a child process; a split without one valid
    cluster fails with its file and line before SentencePiece runs."""
    if args.spm_train_split not in splits:
        raise SystemExit(
            f"cannot train SentencePiece: no split {args.spm_train_split!r} (have {sorted(splits)}); "
            "give --spm-model or --spm-train-split"
        )
    path = splits[args.spm_train_split]
    check_training_split_has_a_cluster(path, args)  # FILE:LINE before sentencepiece
    logger.info("training SentencePiece (asking for %d pieces) on %s", args.vocab_size, path)
    call_in_child(
        train_sentencepiece,
        training_texts(path, args.lowercase, args.multi_reference),
        os.path.join(args.destdir, SPM_MODEL_NAME[: -len(".model")]),
        vocab_size=args.vocab_size,
        model_type=args.spm_model_type,
        seed=args.seed,
    )


def prepare_gpt2_bpe(args: PreprocessConfig) -> Tuple[SubwordEncoder, Dictionary]:
    """GPT-2 BPE: ``--gpt2-encoder-json`` and ``--gpt2-vocab-bpe`` copied
    into ``args.destdir``, and the ``--dict`` all three are required with."""
    from fairseq.data import Dictionary

    missing = [f for f in ("gpt2_encoder_json", "gpt2_vocab_bpe", "dict") if not getattr(args, f)]
    if missing:
        raise SystemExit("--subword gpt2 needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
    encoder_json = os.path.join(args.destdir, "encoder.json")
    vocab_bpe = os.path.join(args.destdir, "vocab.bpe")
    copy_into(args.gpt2_encoder_json, encoder_json)
    copy_into(args.gpt2_vocab_bpe, vocab_bpe)
    return GPT2BPEEncoder(encoder_json, vocab_bpe), Dictionary.load(args.dict)


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
    missing = [
        p.piece for p in proto.pieces if p.type in (kinds.NORMAL, kinds.BYTE) and p.piece not in dictionary.indices
    ]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} pieces of {encoder.model_path} have no entry, e.g. {missing[:5]}; "
            "give the dict.txt that belongs to this SentencePiece model"
        )
    unlisted = [p.piece for p in proto.pieces if p.type == kinds.USER_DEFINED and p.piece not in dictionary.indices]
    if unlisted:
        logger.info(
            "%s: user-defined pieces without an entry of their own (read as <unk> if they occur in the text): %s",
            path,
            unlisted,
        )
