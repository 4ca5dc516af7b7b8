"""Hugging Face T5 v1.1 -> mdsfair's ``t5_v1_1`` model (the component model on T5's backbone).

``mdsfair-import hf-t5 HF_DIR OUT_DIR`` reads a Hugging Face
``T5ForConditionalGeneration`` folder in the layout of ``google/t5-v1_1-*``
(``config.json`` with ``model_type: t5``; ``model.safetensors`` or
``pytorch_model.bin``, single or sharded, read as the other importers read
them: tensors only, never other pickled objects; ``spiece.model``), or a
model id on the Hub (:mod:`mdsfair.importers.hf_hub`), and writes:

* ``OUT_DIR/model.pt``: a ``t5_v1_1`` checkpoint whose flags are the
  configuration's sizes and settings (``--attention-head-dim`` its ``d_kv``,
  ``--feed-forward``, ``--rms-norm-eps``, its dropout on the sub-layers,
  attention probabilities and feed-forward), loadable by ``fairseq-generate
  --path`` and the hub;
* ``OUT_DIR/dict.txt``: T5's vocabulary in Hugging Face's order after
  fairseq's ``<s>`` (:mod:`mdsfair.models.t5_family`: fairseq index = Hugging Face
  id + 1): ``<pad>``, ``</s>``, ``<unk>``, every SentencePiece piece, the
  sentinels ``<extra_id_99>`` ... ``<extra_id_0>`` (``extra_ids`` of
  ``tokenizer_config.json``, 100 when it says none), then one
  ``madeupwordNNNN`` per embedding row that no token names (32,128 rows for
  32,100 tokens in the released models), so every row keeps its id;
* ``OUT_DIR/spm.model`` (a copy of ``spiece.model``) and ``mdsfair.json``,
  a data-bin manifest without splits (SentencePiece subwords, text as
  written), so that ``OUT_DIR`` serves as the model's data directory.

Weights: ``shared`` is the embedding of both stacks and ``lm_head`` the
output layer (when the file has no ``lm_head``, as transformers 5 saves a
model it ties, the output layer is a copy of ``shared``); both gain the row
of fairseq's ``<s>`` (zeros; the model gives ``<s>`` no probability). Layer
``i``'s ``layer.0`` (self-attention), ``layer.1`` (cross-attention, decoder)
and last layer (``DenseReluDense``: ``wi_0``, ``wi_1`` or ``wi``, ``wo``) map
to fairseq's names in the component model's layer (``self_attn``,
``encoder_attn``, ``fc_gate``, ``fc1``, ``fc2`` and their norms); the
relative bias tables of block 0 become each stack's
``relative_position_bias``. A configuration that scales
the decoder output by ``d_model ** -0.5`` (T5 v1.0: ``scale_decoder_outputs``,
or ``tie_word_embeddings`` not false in a configuration without it) is
refused: this model is v1.1's.
"""

import argparse
import functools
import os
import re
import shutil
import sys
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import config_integer, config_value
from mdsfair.importers.hf_bart_files import load_hf_weights, read_json
from mdsfair.importers.hf_hub import found_where, resolve_model_source

#: ``--arch`` of each released size (d_model, d_ff, heads, encoder layers, decoder layers)
RELEASED_SIZES = {
    (512, 1024, 6, 8, 8): "t5_v1_1_small",
    (768, 2048, 12, 12, 12): "t5_v1_1_base",
    (1024, 2816, 16, 24, 24): "t5_v1_1_large",
}

#: fairseq's name of each T5 block's parameter, by (stack, sub-layer index, Hugging Face name)
ATTENTION_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
#: the feed-forward's matrices by ``feed_forward_proj``: Hugging Face's ``DenseReluDense`` name -> fairseq's
FEED_FORWARD_NAMES = {"gated-gelu": {"wi_0": "fc_gate", "wi_1": "fc1", "wo": "fc2"}, "relu": {"wi": "fc1", "wo": "fc2"}}
#: the component model's flags of each ``feed_forward_proj``
FEED_FORWARD_FLAGS = {
    "gated-gelu": ("--feed-forward", "gated-gelu"),
    "relu": ("--feed-forward", "fairseq", "--activation-fn", "relu"),
}
SENTENCEPIECE_FILE = "spiece.model"


def t5_configuration(config: Dict, path: str, model_type: str = "t5") -> Dict:
    """The sizes and settings of ``config.json``, checked."""
    if config.get("model_type") != model_type:
        raise ImportRefused(f"{path}: model_type is {config.get('model_type')!r}, not {model_type!r}")
    scaled = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False)
    if scaled:
        raise ImportRefused(
            f"{path}: the decoder output is scaled by d_model ** -0.5 (T5 v1.0: scale_decoder_outputs, or "
            "tie_word_embeddings not false); mdsfair's t5_v1_1 model is T5 v1.1, which does not scale it"
        )
    feed_forward = config_value(config, "feed_forward_proj", path, default="relu")
    if feed_forward not in ("relu", "gated-gelu"):
        raise ImportRefused(f"{path}: feed_forward_proj {feed_forward!r}: mdsfair's T5 has relu and gated-gelu")
    sizes = {
        name: config_integer(config, name, path)
        for name in ("d_model", "d_ff", "d_kv", "num_heads", "num_layers", "vocab_size")
    }
    sizes["num_decoder_layers"] = config_integer(
        {"num_decoder_layers": config.get("num_decoder_layers") or sizes["num_layers"]}, "num_decoder_layers", path
    )
    buckets = config_integer({"n": config.get("relative_attention_num_buckets", 32)}, "n", path, minimum=2)
    distance = config_integer({"n": config.get("relative_attention_max_distance", 128)}, "n", path)
    return {
        **sizes,
        "relative_attention_num_buckets": buckets,
        "relative_attention_max_distance": distance,
        "feed_forward_proj": feed_forward,
        "layer_norm_epsilon": float(config.get("layer_norm_epsilon", 1e-6)),
        "dropout_rate": float(config.get("dropout_rate", 0.1)),
    }


def architecture_flags(config: Dict) -> Tuple[str, List[str]]:
    """The released architecture of these sizes (``t5_v1_1_base`` for other
    sizes) and every size and setting as a flag (one dropout, ``dropout_rate``,
    on the sub-layers, attention probabilities and feed-forward, as T5's)."""
    key = (config["d_model"], config["d_ff"], config["num_heads"], config["num_layers"], config["num_decoder_layers"])
    dropout = repr(config["dropout_rate"])
    flags = [
        "--encoder-embed-dim", str(config["d_model"]),
        "--decoder-embed-dim", str(config["d_model"]),
        "--encoder-ffn-embed-dim", str(config["d_ff"]),
        "--decoder-ffn-embed-dim", str(config["d_ff"]),
        "--encoder-attention-heads", str(config["num_heads"]),
        "--decoder-attention-heads", str(config["num_heads"]),
        "--encoder-layers", str(config["num_layers"]),
        "--decoder-layers", str(config["num_decoder_layers"]),
        "--attention-head-dim", str(config["d_kv"]),
        "--relative-attention-num-buckets", str(config["relative_attention_num_buckets"]),
        "--relative-attention-max-distance", str(config["relative_attention_max_distance"]),
        *FEED_FORWARD_FLAGS[config["feed_forward_proj"]],
        "--rms-norm-eps", repr(config["layer_norm_epsilon"]),
        "--dropout", dropout,
        "--attention-dropout", dropout,
        "--activation-dropout", dropout,
    ]  # fmt: skip
    return RELEASED_SIZES.get(key, "t5_v1_1_base"), flags


def extra_id_count(tokenizer_dir: str) -> int:
    """``extra_ids`` of ``tokenizer_config.json`` (T5Tokenizer's default, 100, without one)."""
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    if not os.path.isfile(path):
        return 100
    return config_integer({"extra_ids": read_json(path, "tokenizer configuration", dict).get("extra_ids", 100)},
                          "extra_ids", path, minimum=0)  # fmt: skip


def t5_symbols(spm_path: str, extra_ids: int, num_rows: int) -> List[str]:
    """The dictionary entries after fairseq's four specials: T5's pieces from
    id 3 on, the sentinels (``<extra_id_0>`` last), one made-up word per
    unnamed row. T5's ``<pad>``, ``</s>``, ``<unk>`` must be ids 0, 1, 2."""
    import sentencepiece

    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    except (OSError, RuntimeError) as error:
        raise ImportRefused(f"{spm_path}: not a SentencePiece model ({error})") from None
    specials = [processor.id_to_piece(i) for i in range(3)]
    if (processor.pad_id(), processor.eos_id(), processor.unk_id()) != (0, 1, 2):
        raise ImportRefused(
            f"{spm_path}: T5's SentencePiece model has <pad> 0, </s> 1, <unk> 2; this one has pad "
            f"{processor.pad_id()}, eos {processor.eos_id()}, unk {processor.unk_id()} ({specials})"
        )
    pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    named = pieces + [f"<extra_id_{i}>" for i in reversed(range(extra_ids))]
    if 3 + len(named) > num_rows:
        raise ImportRefused(
            f"{spm_path}: {3 + len(named)} tokens ({len(pieces) + 3} pieces, {extra_ids} sentinels) but the "
            f"embedding has {num_rows} rows"
        )
    taken = {"<s>", "<pad>", "</s>", "<unk>"}
    clashes = [piece for piece in named if piece in taken or re.fullmatch(r"madeupword\d{4}", piece)]
    if clashes or len(set(named)) != len(named):
        raise ImportRefused(f"{spm_path}: pieces that fairseq's dictionary cannot hold twice: {clashes[:5]}")
    return named + [f"madeupword{index:04d}" for index in range(num_rows - 3 - len(named))]


def t5_parameter_names(config: Dict) -> Iterator[Tuple[str, str]]:
    """``(Hugging Face name, fairseq name)`` of every tensor but the
    embeddings and the output layer, for ``config``'s layers and
    feed-forward (module docstring); the export reads it the other way."""
    for stack, layers in (("encoder", config["num_layers"]), ("decoder", config["num_decoder_layers"])):
        yield (
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            f"{stack}.relative_position_bias.relative_attention_bias.weight",
        )
        yield f"{stack}.final_layer_norm.weight", f"{stack}.layer_norm.weight"
        attentions = [("SelfAttention", "self_attn")]
        if stack == "decoder":
            attentions.append(("EncDecAttention", "encoder_attn"))
        for index in range(layers):
            hf, ours = f"{stack}.block.{index}.layer", f"{stack}.layers.{index}"
            for sub, (hf_name, our_name) in enumerate(attentions):
                for projection, our_projection in ATTENTION_NAMES.items():
                    yield f"{hf}.{sub}.{hf_name}.{projection}.weight", f"{ours}.{our_name}.{our_projection}.weight"
                yield f"{hf}.{sub}.layer_norm.weight", f"{ours}.{our_name}_layer_norm.weight"
            last = len(attentions)
            for hf_name, our_name in FEED_FORWARD_NAMES[config["feed_forward_proj"]].items():
                yield f"{hf}.{last}.DenseReluDense.{hf_name}.weight", f"{ours}.{our_name}.weight"
            yield f"{hf}.{last}.layer_norm.weight", f"{ours}.final_layer_norm.weight"


def pop_tensor(state: Dict, name: str, source: str):
    """``state[name]``, removed from ``state``; a missing tensor is refused, naming ``source``."""
    if name not in state:
        raise ImportRefused(f"{source}: no tensor {name!r}")
    return state.pop(name)


def fairseq_state_from_hf(state: Dict, config: Dict, weights_path: str) -> Dict:
    """The ``t5_v1_1`` state dict of Hugging Face's tensors (module docstring)."""
    import torch

    state = dict(state)

    def take(name: str):
        return pop_tensor(state, name, weights_path)

    def with_start_row(matrix):
        return torch.cat([matrix.new_zeros(1, matrix.size(1)), matrix])

    shared = take("shared.weight")
    lm_head = state.pop("lm_head.weight", None)
    for copy in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        state.pop(copy, None)
    out = {
        "encoder.version": torch.Tensor([3]),  # fairseq's stack version: the final layer norms are there
        "decoder.version": torch.Tensor([3]),
        "encoder.embed_tokens.weight": with_start_row(shared),
        "decoder.embed_tokens.weight": with_start_row(shared),
        "decoder.output_projection.weight": with_start_row(shared if lm_head is None else lm_head),
    }
    for hf_name, fairseq_name in t5_parameter_names(config):
        out[fairseq_name] = take(hf_name)
    if state:
        raise ImportRefused(f"{weights_path}: tensors a T5 v1.1 model does not have: {', '.join(sorted(state)[:8])}")
    return out


def check_against_model(args, symbols: List[str], fairseq_state: Dict, weights_path: str) -> None:
    """The state loads into the model these flags build (names and shapes)."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models import ARCH_MODEL_REGISTRY

    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = ARCH_MODEL_REGISTRY[args.arch].build_model(argparse.Namespace(**vars(args)), task)
    expected = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    found = {name: tuple(value.shape) for name, value in fairseq_state.items()}
    if expected != found:
        differences = sorted(
            f"{name}: expected {expected.get(name)}, found {found.get(name)}"
            for name in set(expected) | set(found)
            if expected.get(name) != found.get(name)
        )
        raise ImportRefused(f"{weights_path}: does not match config.json's sizes: {'; '.join(differences[:5])}")


def import_manifest(source: Dict[str, object]) -> Dict:
    """``mdsfair.json`` of the import: a data-bin without splits (SentencePiece, text as written)."""
    from mdsfair.data.manifest import MANIFEST_VERSION, STRUCTURE_STREAMS
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    return {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": {"type": "sentencepiece", "model": SPM_MODEL_NAME},
        "sentence_splitter": "rule",
        "lowercase": False,
        "title_document": False,
        "text_normalization": "whitespace",
        "side_data": {},
        "side_data_args": {},
        "structure": list(STRUCTURE_STREAMS),
        "splits": {},
        "imported_from": source,
    }


class T5Family(NamedTuple):
    """What one member of the T5 family imports differently: its kind
    (``hf-t5``), its name, fairseq model and a model id (for ``--help``), how it reads
    ``config.json`` (:func:`t5_configuration`), Hugging Face's tensors
    (:func:`fairseq_state_from_hf`) and the architecture and its flags
    (:func:`architecture_flags`)."""

    kind: str
    name: str
    model: str
    example: str
    configuration: Callable[[Dict, str], Dict]
    state: Callable[[Dict, Dict, str], Dict]
    flags: Callable[[Dict], Tuple[str, List[str]]]


def import_hf_t5(hf_dir: str, out_dir: str, overwrite: bool = False, family: Optional[T5Family] = None) -> Dict:
    """Convert a Hugging Face T5 v1.1 folder (or Hub model id), or one of
    another ``family`` member; returns a summary."""

    from mdsfair.importers.fairseq_bart import training_namespace

    family = family or T5_V1_1
    model = resolve_model_source(hf_dir)
    config_path = os.path.join(model.path, "config.json")
    config = family.configuration(read_json(config_path, "the model configuration", dict), config_path)
    spm_path = os.path.join(model.path, SENTENCEPIECE_FILE)
    if not os.path.isfile(spm_path):
        raise ImportRefused(f"{model.path}: no {SENTENCEPIECE_FILE} (T5's SentencePiece model)")
    state, weights_path = load_hf_weights(model.path)
    fairseq_state = family.state(state, config, weights_path)
    num_rows = fairseq_state["encoder.embed_tokens.weight"].size(0) - 1
    symbols = t5_symbols(spm_path, extra_id_count(model.path), num_rows)
    arch, flags = family.flags(config)
    args = training_namespace(arch, flags)
    check_against_model(args, symbols, fairseq_state, weights_path)
    return write_sentencepiece_import(
        out_dir, overwrite, family.kind, model, weights_path, symbols, spm_path, args, fairseq_state, flags
    )


def write_sentencepiece_import(
    out_dir: str,
    overwrite: bool,
    kind: str,
    model,
    weights_path: str,
    symbols: List[str],
    spm_path: str,
    args,
    fairseq_state,
    arch_flags: List[str],
) -> Dict:
    """The output folder of a SentencePiece family's import (``mdsfair-import
    kind`` of the resolved ``model`` source, its weights read from
    ``weights_path``): ``dict.txt`` of ``symbols``, the SentencePiece model,
    ``model.pt`` (``args``: its ``--arch`` and ``arch_flags``) and the manifest
    naming the source, staged and committed at once. Returns the import's
    summary: ``source`` (the weights), ``found``, ``out_dir``, ``arch``,
    ``arch_flags`` and ``dictionary_size``."""
    from fairseq.data import Dictionary

    from mdsfair.importers.fairseq_bart import save_fairseq_checkpoint
    from mdsfair.importers.output import ImportOutput, import_record
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    source = {"kind": kind, "path": os.path.abspath(model.path), "weights": os.path.basename(weights_path)}
    source.update(model.record())
    manifest = import_manifest(source)
    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    with ImportOutput(out_dir, overwrite, f"mdsfair-import {kind}") as output:
        dictionary.save(output.path("dict.txt"))
        shutil.copyfile(spm_path, output.path(SPM_MODEL_NAME))
        record = import_record(output.staging, out_dir, manifest, fairseq_state)
        save_fairseq_checkpoint(output.path("model.pt"), args, fairseq_state, record)
        output.commit(manifest)
    return {
        "source": weights_path,
        "found": found_where(model),
        "out_dir": out_dir,
        "arch": args.arch,
        "arch_flags": arch_flags,
        "dictionary_size": len(dictionary),
    }


#: T5 v1.1: ``mdsfair-import hf-t5``
T5_V1_1 = T5Family("hf-t5", "T5 v1.1", "t5_v1_1", "google/t5-v1_1-base", t5_configuration, fairseq_state_from_hf,
                   architecture_flags)  # fmt: skip


def run_sentencepiece_import_cli(
    kind: str, description: str, example: str, import_model: Callable[..., Dict], argv: Optional[List[str]]
) -> int:
    """``mdsfair-import KIND HF_DIR OUT_DIR``: ``import_model(hf_dir, out_dir,
    overwrite=...)`` for a SentencePiece family (T5, LongT5, PEGASUS; the folder of
    :func:`write_sentencepiece_import`), then what it found and wrote, its notes and the
    fairseq-generate command with the summary's ``generate_flags`` (a refusal reaches
    :mod:`mdsfair.importers.cli`, which prints it)."""
    parser = argparse.ArgumentParser(prog=f"mdsfair-import {kind}", description=description)
    parser.add_argument("hf_dir", metavar="HF_DIR", help=f"Hugging Face model folder, or model id ({example})")
    parser.add_argument(
        "out_dir", metavar="OUT_DIR", help="output folder (model.pt, dict.txt, spm.model, mdsfair.json)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the files of an earlier import in OUT_DIR")
    args = parser.parse_args(argv)
    summary = import_model(args.hf_dir, args.out_dir, overwrite=args.overwrite)
    out = sys.stdout
    for line in summary["found"]:
        print(line, file=out)
    print(
        f"wrote {summary['out_dir']}/model.pt (--arch {summary['arch']}), dict.txt ({summary['dictionary_size']} "
        f"entries), spm.model and mdsfair.json from {summary['source']}",
        file=out,
    )
    for note in summary.get("notes", ()):
        print(f"  note: {note}", file=out)
    generate = " ".join(summary.get("generate_flags", ()))
    print(
        f"  fairseq-generate DATA_BIN --user-dir mdsfair --path {summary['out_dir']}/model.pt {generate}".rstrip(),
        file=out,
    )
    return 0


def cli_main(argv: Optional[List[str]] = None, family: T5Family = T5_V1_1) -> int:
    return run_sentencepiece_import_cli(
        family.kind,
        f"Convert a Hugging Face {family.name} model (config.json, model.safetensors or pytorch_model.bin, "
        f"spiece.model) to a {family.model} fairseq checkpoint with its dictionary (fairseq index = Hugging Face "
        "id + 1).",
        family.example,
        functools.partial(import_hf_t5, family=family),
        argv,
    )
