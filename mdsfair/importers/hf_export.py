"""What the Hugging Face exporters share (``mdsfair-export hf-bart``,
``hf-led``, ``hf-t5`` and the others of the T5 family, ``hf-pegasus``).

Each writes a Hugging Face model directory for a fairseq checkpoint and the
``dict.txt`` it was trained with: ``config.json``, the weights
(``model.safetensors`` or ``pytorch_model.bin``), the tokenizer's files and
``tokenizer_config.json``. The tokenizer's files are those of the
dictionary's subword model, read next to ``DICT`` unless a flag names them
(:class:`TokenizerFile`, :func:`export_sources`): GPT-2's ``encoder.json``
and ``vocab.bpe`` for BART and LED (written as ``vocab.json`` and
``merges.txt``; :data:`GPT2_FILES`, :func:`hf_config` and
:func:`tokenizer_config` for their BART-shaped configuration), a
SentencePiece model for the T5 family and PEGASUS (copied as
``spiece.model``; :data:`SENTENCEPIECE_FILES`). :func:`export_hf_directory` loads the
checkpoint, has the kind build its :class:`HFDirectory` and writes it through
:class:`mdsfair.importers.output.ImportOutput` (lock, staging folder,
commit); the command line is :func:`run_export_cli`, the same flags for
every kind but those of its tokenizer's files.
"""

import argparse
import os
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from mdsfair.data.manifest import write_json_atomic
from mdsfair.importers import ImportRefused
from mdsfair.importers.hf_bart_files import MASK
from mdsfair.importers.hf_bart_weights import HF_ACTIVATIONS, cfg_value

#: ``--weights-format``: the weights file Hugging Face reads.
WEIGHT_FILES = {"safetensors": "model.safetensors", "bin": "pytorch_model.bin"}


class TokenizerFile(NamedTuple):
    """A file of the dictionary's subword model that an export reads: the
    keyword of the export function, the flag that names it, its name next to
    ``DICT`` (where it is read unless the flag names it), the flag's help,
    and what the file is, for the refusal when it is missing."""

    keyword: str
    flag: str
    name: str
    help: str
    what: str


#: GPT-2's byte-level BPE files, which BART and LED's tokenizers read as ``vocab.json`` and ``merges.txt``.
GPT2_FILES = (
    TokenizerFile(
        "encoder_json", "--gpt2-encoder-json", "encoder.json", "GPT-2 encoder.json of the dictionary",
        "the GPT-2 BPE file of this dictionary",
    ),
    TokenizerFile(
        "vocab_bpe", "--gpt2-vocab-bpe", "vocab.bpe", "GPT-2 vocab.bpe of the dictionary",
        "the GPT-2 BPE file of this dictionary",
    ),
)  # fmt: skip

#: The SentencePiece model of the dictionary (``spm.model`` of an import's folder and of a data-bin that
#: mdsfair-preprocess encoded with SentencePiece), which T5's and PEGASUS's tokenizers read as ``spiece.model``.
SENTENCEPIECE_FILES = (
    TokenizerFile(
        "sentencepiece_model", "--sentencepiece-model", "spm.model",
        "SentencePiece model of the dictionary (the spm.model of the import or of the data-bin)",
        "the SentencePiece model of this dictionary",
    ),
)  # fmt: skip


def export_sources(
    checkpoint: str, dict_path: str, given: Dict[str, Optional[str]], files: Sequence[TokenizerFile] = GPT2_FILES
) -> List[str]:
    """The paths of the tokenizer's ``files`` (those ``given`` by keyword,
    the others next to ``dict_path``), after checking that every input
    exists."""
    for path, what in (
        (checkpoint, "the fairseq checkpoint"),
        (dict_path, "the dict.txt the checkpoint was trained with"),
    ):
        if not os.path.isfile(path):
            raise ImportRefused(f"{path}: missing ({what})")
    unknown = set(given) - {file.keyword for file in files}
    if unknown:
        raise TypeError(f"unexpected tokenizer files {sorted(unknown)}; this export reads {[f.keyword for f in files]}")
    here = os.path.dirname(os.path.abspath(dict_path))
    paths = []
    for file in files:
        path = given.get(file.keyword) or os.path.join(here, file.name)
        if not os.path.isfile(path):
            raise ImportRefused(f"{path}: missing; give {file.what} with {file.flag}")
        paths.append(path)
    return paths


def load_exported_checkpoint(checkpoint: str):
    """``(state, model configuration)`` of a fairseq checkpoint (its
    ``cfg.model``, or the ``args`` namespace of an older one). Registers
    mdsfair first: its architectures and the checkpoint checks with which
    fairseq's loader reads a checkpoint on torch >= 2.6."""
    import mdsfair

    mdsfair.register()
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    model_cfg = state["cfg"]["model"] if state.get("cfg") is not None else state["args"]
    return state, model_cfg


def hf_config(
    model_type: str,
    architecture: str,
    model_cfg,
    num_rows: int,
    d_model: int,
    layers: Dict[str, int],
    positions: Dict,
    tied: bool,
    embedding: Optional[Dict] = None,
    generation: Optional[Dict] = None,
) -> Dict:
    """``config.json`` of a BART-shaped Hugging Face model (``BartConfig``,
    ``LEDConfig``) from the fairseq model configuration: the sizes, the
    ``positions`` fields of the model type, activation and dropouts, the
    ``embedding`` fields (BART's ``scale_embedding``), the tying, fairseq's
    special token ids (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, the decoder
    starting from ``</s>``) and the ``generation`` fields."""
    return {
        "model_type": model_type,
        "architectures": [architecture],
        "vocab_size": num_rows,
        "d_model": d_model,
        "encoder_layers": layers["encoder"],
        "decoder_layers": layers["decoder"],
        "encoder_attention_heads": cfg_value(model_cfg, "encoder_attention_heads"),
        "decoder_attention_heads": cfg_value(model_cfg, "decoder_attention_heads"),
        "encoder_ffn_dim": cfg_value(model_cfg, "encoder_ffn_embed_dim"),
        "decoder_ffn_dim": cfg_value(model_cfg, "decoder_ffn_embed_dim"),
        **positions,
        "activation_function": HF_ACTIVATIONS[cfg_value(model_cfg, "activation_fn", "gelu")],
        "dropout": cfg_value(model_cfg, "dropout", 0.1),
        "attention_dropout": cfg_value(model_cfg, "attention_dropout", 0.0),
        "activation_dropout": cfg_value(model_cfg, "activation_dropout", 0.0),
        "encoder_layerdrop": cfg_value(model_cfg, "encoder_layerdrop", 0.0),
        "decoder_layerdrop": cfg_value(model_cfg, "decoder_layerdrop", 0.0),
        **(embedding or {}),
        "tie_word_embeddings": tied,
        "is_encoder_decoder": True,
        "bos_token_id": 0,
        "pad_token_id": 1,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        **(generation or {}),
    }


def tokenizer_config(tokenizer_class: str, model_max_length: int, **extra) -> Dict:
    """``tokenizer_config.json`` of a GPT-2 byte-level BPE tokenizer with
    fairseq's special tokens and no prefix space (mdsfair-preprocess's GPT-2
    encoder adds none)."""
    return {
        "tokenizer_class": tokenizer_class,
        "model_max_length": model_max_length,
        "add_prefix_space": False,
        "errors": "replace",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "mask_token": MASK,
        **extra,
    }


class HFDirectory(NamedTuple):
    """The files of a Hugging Face model directory, before they are written:
    ``config.json``, ``vocab.json`` and the merges of ``merges.txt`` (a BPE
    tokenizer's; None: no such file), ``tokenizer_config.json``, the weights,
    ``added_tokens.json`` (None: no such file), and the files copied as they
    are (name in the directory -> the file copied: T5's ``spiece.model``)."""

    config: Dict
    vocab: Optional[Dict[str, int]]
    merges: Optional[List[str]]
    tokenizer: Dict
    weights: Dict
    added_tokens: Optional[Dict[str, int]] = None
    copied: Optional[Dict[str, str]] = None


def export_hf_directory(
    kind: str,
    build: Callable[..., HFDirectory],
    checkpoint: str,
    dict_path: str,
    out_dir: str,
    weights_format: str = "safetensors",
    overwrite: bool = False,
    tokenizer_files: Sequence[TokenizerFile] = GPT2_FILES,
    **tokenizer_paths: Optional[str],
) -> Dict:
    """``mdsfair-export KIND``: the Hugging Face directory ``out_dir`` of a
    fairseq ``checkpoint`` and the ``dict.txt`` it was trained with.
    ``build(checkpoint, state, model_cfg, dict_path, *paths)`` makes the
    kind's :class:`HFDirectory` from the loaded checkpoint
    (:func:`load_exported_checkpoint`) and the paths of the dictionary's
    ``tokenizer_files`` (:func:`export_sources`; ``tokenizer_paths`` names
    them by keyword, such as ``encoder_json=``); :func:`write_hf_directory`
    writes it. Returns ``out_dir``, the config, the names of the files written
    and the added tokens."""
    paths = export_sources(checkpoint, dict_path, tokenizer_paths, tokenizer_files)
    state, model_cfg = load_exported_checkpoint(checkpoint)
    directory = build(checkpoint, state, model_cfg, dict_path, *paths)
    sources = [checkpoint, dict_path, *paths]
    names = write_hf_directory(kind, checkpoint, sources, out_dir, overwrite, directory, weights_format)
    return {"out_dir": out_dir, "config": directory.config, "files": names, "added_tokens": directory.added_tokens}


def write_hf_directory(
    kind: str,
    checkpoint: str,
    sources: Sequence[str],
    out_dir: str,
    overwrite: bool,
    directory: HFDirectory,
    weights_format: str,
) -> List[str]:
    """Write ``directory`` to ``out_dir`` (through
    :class:`~mdsfair.importers.output.ImportOutput`, whose manifest names
    ``checkpoint``; ``sources`` are the files read) and return the names of
    the files written: ``vocab.json`` and ``merges.txt`` only for a BPE
    tokenizer, ``added_tokens.json`` only with added tokens, then the files
    copied."""
    import shutil

    from mdsfair.importers.output import ImportOutput, export_manifest

    weights = WEIGHT_FILES[weights_format]
    bpe = ["vocab.json", "merges.txt"] if directory.vocab is not None else []
    names = ["config.json", *bpe, "tokenizer_config.json", weights]
    with ImportOutput(out_dir, overwrite, f"mdsfair-export {kind}", list(sources)) as output:
        staging = output.staging
        write_json_atomic(os.path.join(staging, "config.json"), directory.config, indent=2)
        if directory.vocab is not None:
            write_json_atomic(os.path.join(staging, "vocab.json"), directory.vocab, ensure_ascii=False)
            with open(os.path.join(staging, "merges.txt"), "w", encoding="utf-8") as f:
                f.write("#version: 0.2\n" + "".join(merge + "\n" for merge in directory.merges))
        write_json_atomic(os.path.join(staging, "tokenizer_config.json"), directory.tokenizer, indent=2)
        if directory.added_tokens is not None:
            write_json_atomic(os.path.join(staging, "added_tokens.json"), directory.added_tokens, indent=2)
            names.append("added_tokens.json")
        for name, source in (directory.copied or {}).items():
            shutil.copyfile(source, os.path.join(staging, name))
            names.append(name)
        tensors = {name: tensor.contiguous().clone() for name, tensor in directory.weights.items()}
        if weights_format == "safetensors":
            try:
                from safetensors.torch import save_file
            except ImportError as error:
                raise ImportRefused(
                    "writing model.safetensors needs the safetensors package; pass --weights-format bin"
                ) from error
            save_file(tensors, os.path.join(staging, weights), metadata={"format": "pt"})
        else:
            import torch

            torch.save(tensors, os.path.join(staging, weights))
        output.commit(export_manifest(kind, checkpoint))
    return names


def run_export_cli(
    kind: str,
    description: str,
    checkpoint_help: str,
    export: Callable[..., Dict],
    argv: Optional[List[str]],
    tokenizer_files: Sequence[TokenizerFile] = GPT2_FILES,
) -> int:
    """``mdsfair-export KIND CKPT DICT OUT_DIR``: ``export(checkpoint, dict,
    out_dir, ...)`` with :func:`export_hf_directory`'s options and a flag for
    each of the kind's ``tokenizer_files`` (a refusal reaches
    :mod:`mdsfair.importers.cli`, which prints it)."""
    parser = argparse.ArgumentParser(prog=f"mdsfair-export {kind}", description=description)
    parser.add_argument("checkpoint", help=checkpoint_help)
    parser.add_argument("dict", help="the dict.txt it was trained with (e.g. data-bin/dict.txt)")
    parser.add_argument("out_dir", help="the Hugging Face model directory to write")
    for file in tokenizer_files:
        parser.add_argument(
            file.flag,
            dest=file.keyword,
            metavar=file.flag[2:].replace("-", "_").upper(),
            help=f"{file.help} (default: next to DICT)",
        )
    parser.add_argument(
        "--weights-format",
        choices=tuple(WEIGHT_FILES),
        default="safetensors",
        help="model.safetensors (default) or pytorch_model.bin",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace files already in OUT_DIR")
    args = parser.parse_args(argv)
    options = {file.keyword: getattr(args, file.keyword) for file in tokenizer_files}
    summary = export(
        args.checkpoint,
        args.dict,
        args.out_dir,
        weights_format=args.weights_format,
        overwrite=args.overwrite,
        **options,
    )
    print(f"wrote {', '.join(summary['files'])} to {summary['out_dir']}")
    return 0
