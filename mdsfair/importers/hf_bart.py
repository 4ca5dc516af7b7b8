"""Hugging Face BART <-> fairseq BART.

``mdsfair-import hf-bart HF_DIR OUT_DIR`` reads a Hugging Face BART model
directory (``config.json``; ``model.safetensors`` or ``pytorch_model.bin``,
sharded or not; ``vocab.json`` and ``merges.txt``) and writes

* ``OUT_DIR/model.pt``: a fairseq ``bart`` checkpoint (today's layout, see
  :mod:`mdsfair.importers.fairseq_bart`) that ``fairseq-generate --path``
  loads and ``fairseq-train --restore-file`` restores into every BART-based
  architecture (``bart_*``, ``hierencdec_bart_*``, ``pagesum_bart_*``,
  ``sparse_bart_*``);
* ``OUT_DIR/dict.txt``, ``encoder.json``, ``vocab.bpe``: the files of
  ``mdsfair-preprocess --subword gpt2``, built so that the ids it writes are
  the Hugging Face tokenizer's.

The vocabulary. fairseq's BART ``dict.txt`` lists GPT-2 BPE ids as symbols
after its four specials ``<s> <pad> </s> <unk>`` (indices 0-3); Hugging Face
re-indexed ``vocab.json`` so that a token's id *is* that fairseq index. The
importer therefore writes ``encoder.json`` mapping every token to its
Hugging Face id and ``dict.txt`` whose symbol at index ``i`` is the string
``i`` (``<mask>`` where ``vocab.json`` has it, ``madeupwordNNNN`` for an
embedding row no token uses): the GPT-2 encoder maps a token to ``i``, the
dictionary maps ``"i"`` back to index ``i``. ``vocab.bpe`` holds the merges
in ``merges.txt``'s order (their ranks).

The weights map one to one (the same layer and projection names, the same
2-row offset of the learned position tables, fairseq's
``padding_idx + 1 = 2``), with these cases:

* ``scale_embedding``: fairseq's ``bart_*`` architectures fix
  ``no_scale_embedding=True`` and no command-line flag turns it off, so a
  model that multiplies its embeddings by ``sqrt(d_model)`` is converted by
  folding: the token embedding is multiplied by ``sqrt(d_model)``, and, when
  the output projection is tied to it, the last decoder layer's final
  LayerNorm (weight and bias, the last operation before the projection) is
  divided by it. The logits are the same; every BART-based architecture
  restores it.
* ``lm_head``: tied (``tie_word_embeddings``, every released BART: encoder,
  decoder and output share ``shared``) becomes ``--share-all-embeddings``.
  Untied, each of ``encoder.embed_tokens``, ``decoder.embed_tokens`` (both
  ``shared`` when the file has no key of their own) and ``lm_head`` is its
  own tensor, written with ``share_all_embeddings`` and
  ``share_decoder_input_output_embed`` off in the checkpoint's cfg, which
  ``fairseq-generate --path`` and the hub honour. fairseq's ``bart_*``
  architectures always tie, so ``--restore-file`` into them would overwrite
  the head with the embedding: the importer says so when it converts one.
* ``final_logits_bias``: fairseq's output projection has no bias. Hugging
  Face keeps it as a buffer that training never changes (zeros); a nonzero
  one is refused.
* ``<mask>`` present or absent, ``vocab_size`` below ``len(vocab.json)``
  (``bart-large-cnn``: 50,264 rows, ``<mask>`` unused), embedding rows no
  token uses: the dictionary has exactly one symbol per embedding row.

Refused with the file named: another ``model_type`` (mBART, PEGASUS, LED,
...), pre-LayerNorm or extra-LayerNorm configurations, an activation fairseq
lacks, weights other than BART's, special tokens at other ids than fairseq's
0-3, tokens the tokenizer adds beyond ``vocab.json``, ``add_prefix_space``.

``mdsfair-export hf-bart CKPT DICT OUT_DIR`` is the reverse for plain
``bart_*`` checkpoints (``config.json``, ``model.safetensors`` or
``pytorch_model.bin``, ``vocab.json``, ``merges.txt``,
``tokenizer_config.json``), with ``encoder.json`` / ``vocab.bpe`` read next
to ``DICT`` (a data-bin or an import's ``OUT_DIR`` has them) unless given.
"""
import argparse
import json
import math
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from mdsfair.data.manifest import write_json_atomic
from mdsfair.importers import ImportRefused

SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq Dictionary indices 0-3
MASK = "<mask>"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_SUFFIX = ".index.json"

# Hugging Face activation name -> fairseq --activation-fn. ``gelu`` is the
# erf GELU in both; ``gelu_new`` / ``gelu_pytorch_tanh`` are the tanh
# approximation, fairseq's ``gelu_accurate``.
ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "gelu_new": "gelu_accurate",
    "gelu_pytorch_tanh": "gelu_accurate",
}

# Per-layer parameter modules, identical names in both libraries.
ATTENTION = ("k_proj", "v_proj", "q_proj", "out_proj")
ENCODER_LAYER_MODULES = tuple(f"self_attn.{p}" for p in ATTENTION) + ("self_attn_layer_norm", "fc1", "fc2", "final_layer_norm")
DECODER_LAYER_MODULES = (
    tuple(f"self_attn.{p}" for p in ATTENTION)
    + ("self_attn_layer_norm",)
    + tuple(f"encoder_attn.{p}" for p in ATTENTION)
    + ("encoder_attn_layer_norm", "fc1", "fc2", "final_layer_norm")
)

# Legacy config fields of transformers < 4 that changed what BART computes;
# BART's values are the defaults, anything else is another model.
LEGACY_BART_FIELDS = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": True,
    "static_position_embeddings": False,
    "add_bias_logits": False,
}


# ------------------------------------------------------------------ reading


def read_json(path: str, what: str):
    if not os.path.isfile(path):
        raise ImportRefused(f"{path}: missing ({what})")
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as error:
            raise ImportRefused(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from error


def load_tensor_file(path: str):
    """One ``.safetensors`` or ``torch.save`` state dict file."""
    import torch

    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError as error:
            raise ImportRefused(f"{path}: reading .safetensors needs the safetensors package (pip install safetensors)") from error
        return load_file(path, device="cpu")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ImportRefused(f"{path}: not a state dict (a mapping of names to tensors)")
    return state


def load_hf_weights(model_dir: str) -> Tuple[Dict, str]:
    """The model's tensors and the file(s) they came from: ``model.safetensors``
    first (as Hugging Face prefers it), then ``pytorch_model.bin``, each
    single or sharded (``*.index.json``)."""
    for name in WEIGHT_FILES:
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return load_tensor_file(path), path
        index_path = path + INDEX_SUFFIX
        if os.path.isfile(index_path):
            index = read_json(index_path, "shard index")
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict):
                raise ImportRefused(f"{index_path}: no 'weight_map'")
            state = {}
            for shard in sorted(set(weight_map.values())):
                shard_path = os.path.join(model_dir, shard)
                if not os.path.isfile(shard_path):
                    raise ImportRefused(f"{shard_path}: missing (listed in {index_path})")
                state.update(load_tensor_file(shard_path))
            return state, index_path
    raise ImportRefused(
        f"{model_dir}: no weights: none of {', '.join(WEIGHT_FILES)} (or their sharded *.index.json) is there"
    )


# -------------------------------------------------------------------- config


@dataclass
class BartShape:
    """What a BART configuration fixes, in fairseq's terms."""

    embed_dim: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_embed_dim: int
    decoder_ffn_embed_dim: int
    max_positions: int
    activation_fn: str
    scale_embedding: bool
    tied_output: bool
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    notes: List[str] = field(default_factory=list)

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.embed_dim) if self.scale_embedding else 1.0


def bart_shape(config: Dict, path: str) -> BartShape:
    """Check a Hugging Face ``config.json`` (already read from ``path``) is
    BART and return its shape; refuse what fairseq's BART cannot compute."""
    model_type = config.get("model_type")
    if model_type != "bart":
        raise ImportRefused(
            f"{path}: model_type is {model_type!r}, not 'bart'; only BART checkpoints convert to fairseq's bart "
            "architectures (mBART, PEGASUS, LED, Marian and others differ in layer norms, positions or vocabulary)"
        )
    if config.get("extra_pos_embeddings", 2) != 2:
        raise ImportRefused(
            f"{path}: extra_pos_embeddings={config['extra_pos_embeddings']}; BART's position tables have 2 offset rows"
        )
    for name, bart_value in LEGACY_BART_FIELDS.items():
        if name in config and bool(config[name]) != bart_value:
            raise ImportRefused(
                f"{path}: {name}={json.dumps(config[name])} is not BART's ({json.dumps(bart_value)}); "
                "fairseq's bart architectures are post-LayerNorm with an embedding LayerNorm and no extra "
                "final LayerNorm or logits bias"
            )
    for name, fairseq_id in (("bos_token_id", 0), ("pad_token_id", 1), ("eos_token_id", 2), ("decoder_start_token_id", 2)):
        value = config.get(name, fairseq_id)
        if value is not None and value != fairseq_id:
            raise ImportRefused(
                f"{path}: {name}={value}, but fairseq's BART uses {fairseq_id} "
                "(<s>=0, <pad>=1, </s>=2; the decoder starts with </s>)"
            )
    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise ImportRefused(
            f"{path}: activation_function {activation!r} has no fairseq equivalent (supported: {', '.join(ACTIVATIONS)})"
        )
    try:
        d_model = int(config["d_model"])
        encoder_heads = int(config["encoder_attention_heads"])
        decoder_heads = int(config["decoder_attention_heads"])
        shape = BartShape(
            embed_dim=d_model,
            encoder_layers=int(config["encoder_layers"]),
            decoder_layers=int(config["decoder_layers"]),
            encoder_attention_heads=encoder_heads,
            decoder_attention_heads=decoder_heads,
            encoder_ffn_embed_dim=int(config["encoder_ffn_dim"]),
            decoder_ffn_embed_dim=int(config["decoder_ffn_dim"]),
            max_positions=int(config["max_position_embeddings"]),
            activation_fn=ACTIVATIONS[activation],
            scale_embedding=bool(config.get("scale_embedding", False)),
            tied_output=bool(config.get("tie_word_embeddings", True)),
            dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            encoder_layerdrop=float(config.get("encoder_layerdrop", 0.0)),
            decoder_layerdrop=float(config.get("decoder_layerdrop", 0.0)),
        )
    except KeyError as error:
        raise ImportRefused(f"{path}: BART config field {error.args[0]!r} is missing") from error
    for heads in (encoder_heads, decoder_heads):
        if d_model % heads:
            raise ImportRefused(f"{path}: d_model {d_model} is not divisible by {heads} attention heads")
    return shape


# ------------------------------------------------------------------- weights


def layer_keys(module: str) -> Tuple[str, str]:
    return f"{module}.weight", f"{module}.bias"


def hf_prefix(state: Dict) -> str:
    """``model.`` for BartForConditionalGeneration (and PageSumModel), ``''`` for BartModel."""
    return "model." if any(key.startswith("model.") for key in state) else ""


def fairseq_state_from_hf(
    state: Dict,
    shape: BartShape,
    source: str,
    ignored: Iterable[str] = (),
) -> "OrderedDict":
    """fairseq ``bart`` state dict from a Hugging Face BART state dict.

    ``ignored`` names keys the caller converts itself (PageSum's ``lin``).
    Every other key must be a BART weight; anything else is refused, so a
    checkpoint of another architecture cannot pass unnoticed.
    """
    import torch

    prefix = hf_prefix(state)
    used = set(ignored)

    def take(key: str) -> "torch.Tensor":
        full = prefix + key
        if full not in state:
            raise ImportRefused(f"{source}: {full} is missing")
        used.add(full)
        return state[full]

    def optional(key: str) -> Optional["torch.Tensor"]:
        if key in state:
            used.add(key)
            return state[key]
        return None

    # Token embeddings. Hugging Face ties encoder, decoder and lm_head to
    # ``shared`` when tie_word_embeddings is set (every released BART); without
    # it (transformers >= 5) each is its own parameter, read from its own key.
    shared_name = prefix + "shared.weight"
    names = {"encoder": prefix + "encoder.embed_tokens.weight", "decoder": prefix + "decoder.embed_tokens.weight"}
    available = [n for n in (shared_name, *names.values()) if n in state]
    if not available:
        raise ImportRefused(f"{source}: no token embedding ({shared_name}, {', '.join(names.values())})")
    used.update(available)
    fallback = state[available[0]]
    embeddings = {part: state.get(name, state.get(shared_name, fallback)) for part, name in names.items()}
    lm_head = optional("lm_head.weight")
    if shape.tied_output:
        for name in available + (["lm_head.weight"] if lm_head is not None else []):
            if not torch.equal(state[name], fallback):
                raise ImportRefused(
                    f"{source}: {name} differs from {available[0]} although config.json ties them "
                    "(tie_word_embeddings=true); Hugging Face versions disagree on which one such a file means"
                )
        output_projection = None
    else:
        if lm_head is None:
            raise ImportRefused(f"{source}: lm_head.weight is missing and config.json does not tie it (tie_word_embeddings=false)")
        output_projection = lm_head
    for name, tensor in [*embeddings.items(), *([("lm_head", output_projection)] if output_projection is not None else [])]:
        if tensor.shape != fallback.shape:
            raise ImportRefused(f"{source}: the {name} embedding {tuple(tensor.shape)} differs in shape from {tuple(fallback.shape)}")
    if fallback.size(1) != shape.embed_dim:
        raise ImportRefused(f"{source}: the embedding has width {fallback.size(1)}, config d_model is {shape.embed_dim}")

    bias = optional("final_logits_bias")
    if bias is not None and bias.abs().max().item() != 0:
        raise ImportRefused(
            f"{source}: final_logits_bias is nonzero (max |b| = {bias.abs().max().item():.3g}); fairseq's BART "
            "output projection has no bias, so these logits cannot be reproduced"
        )

    scale = shape.embed_scale
    out = OrderedDict()
    for part, modules, layers in (
        ("encoder", ENCODER_LAYER_MODULES, shape.encoder_layers),
        ("decoder", DECODER_LAYER_MODULES, shape.decoder_layers),
    ):
        out[f"{part}.version"] = torch.Tensor([3])
        if shape.tied_output and part == "decoder":
            out["decoder.embed_tokens.weight"] = out["encoder.embed_tokens.weight"]  # one tensor: shared
        else:
            out[f"{part}.embed_tokens.weight"] = embeddings[part] * scale if shape.scale_embedding else embeddings[part]
        positions = take(f"{part}.embed_positions.weight")
        if positions.size(0) != shape.max_positions + 2:
            raise ImportRefused(
                f"{source}: {prefix}{part}.embed_positions.weight has {positions.size(0)} rows; BART's learned positions "
                f"have max_position_embeddings + 2 = {shape.max_positions + 2} (two offset rows)"
            )
        out[f"{part}.embed_positions.weight"] = positions
        for key in layer_keys(f"{part}.layernorm_embedding"):
            out[key] = take(key)
        for layer in range(layers):
            for module in modules:
                for key in layer_keys(f"{part}.layers.{layer}.{module}"):
                    out[key] = take(key)

    if output_projection is not None:
        out["decoder.output_projection.weight"] = output_projection
    else:
        out["decoder.output_projection.weight"] = out["decoder.embed_tokens.weight"]
        if shape.scale_embedding:
            # logits = h W^T with W scaled by s: scale h by 1/s through the last
            # operation before the projection (post-LN: the last layer's final LayerNorm).
            last = f"decoder.layers.{shape.decoder_layers - 1}.final_layer_norm"
            out[f"{last}.weight"] = out[f"{last}.weight"] / scale
            out[f"{last}.bias"] = out[f"{last}.bias"] / scale

    for name in (prefix + "encoder.version", prefix + "decoder.version", "encoder.version", "decoder.version"):
        if name in state:
            used.add(name)
    unexpected = sorted(set(state) - used)
    if unexpected:
        shown = ", ".join(unexpected[:6]) + (" ..." if len(unexpected) > 6 else "")
        raise ImportRefused(
            f"{source}: {len(unexpected)} weights are not BART's and would be lost: {shown} "
            "(the layer counts in config.json may not match the file, or the model is another architecture)"
        )
    return out


# ---------------------------------------------------------------- vocabulary


@dataclass
class BPEFiles:
    """What ``mdsfair-preprocess --subword gpt2`` reads."""

    encoder: Dict[str, int]  # token -> id (= fairseq index)
    merges: List[str]  # "a b" in rank order
    symbols: List[str]  # dict.txt symbols for indices 4 .. rows-1

    def write(self, out_dir: str) -> None:
        write_json_atomic(os.path.join(out_dir, "encoder.json"), self.encoder, ensure_ascii=True)
        with open(os.path.join(out_dir, "vocab.bpe"), "w", encoding="utf-8") as f:
            # fairseq's GPT-2 reader skips the first line and the text after the last newline.
            f.write("#version: 0.2\n" + "".join(merge + "\n" for merge in self.merges))
        with open(os.path.join(out_dir, "dict.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"{symbol} 1\n" for symbol in self.symbols))


def read_merges(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise ImportRefused(f"{path}: missing (the BPE merges)")
    merges = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line or (number == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not all(parts):
                raise ImportRefused(f"{path}:{number}: a merge is two symbols separated by one space, got {line!r}")
            merges.append(line)
    return merges


def check_tokenizer_extras(tokenizer_dir: str, vocab: Dict[str, int]) -> None:
    """Refuse tokenizers whose ids the GPT-2 encoder of mdsfair-preprocess would
    not reproduce: added tokens beyond ``vocab.json`` and a prefix space."""
    known = set(SPECIAL_SYMBOLS) | {MASK}
    added_path = os.path.join(tokenizer_dir, "added_tokens.json")
    added = dict(read_json(added_path, "added tokens")) if os.path.isfile(added_path) else {}
    tokenizer_path = os.path.join(tokenizer_dir, "tokenizer.json")
    tokenizer = read_json(tokenizer_path, "tokenizer") if os.path.isfile(tokenizer_path) else {}
    for entry in tokenizer.get("added_tokens") or []:
        added[entry.get("content")] = entry.get("id")
    extra = sorted(token for token in added if token not in known)
    if extra:
        where = added_path if os.path.isfile(added_path) else tokenizer_path
        raise ImportRefused(
            f"{where}: the tokenizer adds tokens that byte-level BPE never produces ({', '.join(map(repr, extra[:5]))}); "
            "mdsfair-preprocess's GPT-2 encoder cannot reproduce its ids"
        )
    for token, token_id in added.items():
        if token in vocab and vocab[token] != token_id:
            raise ImportRefused(f"{tokenizer_dir}: {token!r} has id {token_id} in the tokenizer but {vocab[token]} in vocab.json")
    config_path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    prefix_space = read_json(config_path, "tokenizer config").get("add_prefix_space") if os.path.isfile(config_path) else None
    pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
    for node in [pre_tokenizer] + list(pre_tokenizer.get("pretokenizers") or []):
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space"):
            prefix_space = True
    if prefix_space:
        raise ImportRefused(
            f"{tokenizer_dir}: the tokenizer adds a prefix space (add_prefix_space=true); mdsfair-preprocess's GPT-2 "
            "encoder, like BART's, does not"
        )


def bpe_files(tokenizer_dir: str, num_rows: int) -> BPEFiles:
    """``encoder.json`` / ``vocab.bpe`` / ``dict.txt`` contents for a model with
    ``num_rows`` embedding rows, from ``vocab.json`` and ``merges.txt``."""
    vocab_path = os.path.join(tokenizer_dir, "vocab.json")
    vocab = read_json(vocab_path, "the tokenizer vocabulary")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ImportRefused(f"{vocab_path}: expected a JSON object mapping tokens to integer ids")
    for index, symbol in enumerate(SPECIAL_SYMBOLS):
        if vocab.get(symbol) != index:
            raise ImportRefused(
                f"{vocab_path}: {symbol} has id {vocab.get(symbol)}; fairseq's dictionary puts "
                f"{' '.join(SPECIAL_SYMBOLS)} at 0-3, so the ids would not match"
            )
    by_id: Dict[int, str] = {}
    for token, token_id in vocab.items():
        if token_id in by_id:
            raise ImportRefused(f"{vocab_path}: tokens {by_id[token_id]!r} and {token!r} share id {token_id}")
        if token_id < 0:
            raise ImportRefused(f"{vocab_path}: {token!r} has a negative id {token_id}")
        by_id[token_id] = token
    beyond = sorted(i for i, token in by_id.items() if i >= num_rows and token != MASK)
    if beyond:
        raise ImportRefused(
            f"{vocab_path}: {len(beyond)} tokens have ids at or above the model's {num_rows} embedding rows "
            f"(e.g. {by_id[beyond[0]]!r} = {beyond[0]})"
        )
    check_tokenizer_extras(tokenizer_dir, vocab)
    encoder, symbols, unused = {}, [], 0
    for index in range(len(SPECIAL_SYMBOLS), num_rows):
        token = by_id.get(index)
        if token == MASK:
            symbols.append(MASK)
        elif token is None:
            symbols.append(f"madeupword{unused:04d}")
            unused += 1
        else:
            encoder[token] = index
            symbols.append(str(index))
    return BPEFiles(encoder=encoder, merges=read_merges(os.path.join(tokenizer_dir, "merges.txt")), symbols=symbols)


# -------------------------------------------------------------- architecture


ARCH_DEFAULTS = {
    "bart_base": {"embed_dim": 768, "layers": 6, "heads": 12},
    "bart_large": {"embed_dim": 1024, "layers": 12, "heads": 16},
}


def architecture_flags(shape: BartShape, family: str = "bart") -> Tuple[str, List[str]]:
    """The ``--arch`` (``{family}_base`` or ``{family}_large``) closest to
    ``shape`` and the flags that make it exactly ``shape``: what to pass to
    ``fairseq-train`` with ``--restore-file``."""
    size = "base" if (shape.embed_dim, shape.encoder_layers) == (768, 6) else "large"
    defaults = ARCH_DEFAULTS[f"bart_{size}"]
    d = defaults["embed_dim"]
    expected = {
        "encoder_embed_dim": d,
        "decoder_embed_dim": d,
        "encoder_ffn_embed_dim": 4 * d,
        "decoder_ffn_embed_dim": 4 * d,
        "encoder_layers": defaults["layers"],
        "decoder_layers": defaults["layers"],
        "encoder_attention_heads": defaults["heads"],
        "decoder_attention_heads": defaults["heads"],
    }
    actual = {
        "encoder_embed_dim": shape.embed_dim,
        "decoder_embed_dim": shape.embed_dim,
        "encoder_ffn_embed_dim": shape.encoder_ffn_embed_dim,
        "decoder_ffn_embed_dim": shape.decoder_ffn_embed_dim,
        "encoder_layers": shape.encoder_layers,
        "decoder_layers": shape.decoder_layers,
        "encoder_attention_heads": shape.encoder_attention_heads,
        "decoder_attention_heads": shape.decoder_attention_heads,
    }
    flags: List[str] = []
    for name, value in actual.items():
        if value != expected[name]:
            flags += ["--" + name.replace("_", "-"), str(value)]
    if shape.activation_fn != "gelu":
        flags += ["--activation-fn", shape.activation_fn]
    return f"{family}_{size}", flags


def position_flags(shape: BartShape) -> List[str]:
    return ["--max-source-positions", str(shape.max_positions), "--max-target-positions", str(shape.max_positions)]


def training_flags(shape: BartShape, arch_flags: List[str]) -> List[str]:
    """The flags to add to ``--arch`` when fine-tuning: the shape, and the
    position tables when they differ from the architectures' 1,024
    (HierEncDec sets its own --max-source-positions and tiles the table)."""
    return arch_flags + (position_flags(shape) if shape.max_positions != 1024 else [])


def checkpoint_namespace(shape: BartShape, arch: str, flags: List[str], extra: Iterable[str] = ()) -> argparse.Namespace:
    """The training namespace recorded in the checkpoint (dropouts from the
    Hugging Face config, tying as converted)."""
    from mdsfair.importers.fairseq_bart import training_namespace

    dropouts = [
        "--dropout", str(shape.dropout),
        "--attention-dropout", str(shape.attention_dropout),
        "--activation-dropout", str(shape.activation_dropout),
        "--encoder-layerdrop", str(shape.encoder_layerdrop),
        "--decoder-layerdrop", str(shape.decoder_layerdrop),
    ]
    args = training_namespace(arch, [*flags, *position_flags(shape), *dropouts, *extra])
    if not shape.tied_output:
        args.share_all_embeddings = False
        args.share_decoder_input_output_embed = False
    return args


def generation_flags(model_dir: str) -> Tuple[List[str], List[str]]:
    """fairseq-generate flags equal to the model's Hugging Face generation
    defaults (``generation_config.json``, else ``config.json``), and notes on
    what has no fairseq flag. fairseq counts lengths without the decoder's
    start token and with the final ``</s>``: ``--min-len = min_length - 1``,
    ``--max-len-b = max_length - 2``."""
    settings: Dict = {}
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            settings.update({k: v for k, v in read_json(path, name).items() if v is not None})
    flags: List[str] = []
    notes: List[str] = []
    if "num_beams" in settings:
        flags += ["--beam", str(settings["num_beams"])]
    if "length_penalty" in settings:
        flags += ["--lenpen", str(settings["length_penalty"])]
    if settings.get("min_length"):
        flags += ["--min-len", str(max(int(settings["min_length"]) - 1, 0))]
    if settings.get("max_length"):
        flags += ["--max-len-a", "0", "--max-len-b", str(max(int(settings["max_length"]) - 2, 1))]
    if settings.get("no_repeat_ngram_size"):
        flags += ["--no-repeat-ngram-size", str(settings["no_repeat_ngram_size"])]
    if settings.get("forced_bos_token_id") is not None:
        notes.append(
            f"Hugging Face forces token {settings['forced_bos_token_id']} (<s>) as the first generated token; "
            "fairseq-generate does not (the model predicts it itself after fine-tuning that way)"
        )
    if settings.get("num_beams", 1) > 1 and settings.get("early_stopping") is False:
        notes.append("fairseq's beam search stops as Hugging Face's early_stopping=True does")
    return flags, notes


# ------------------------------------------------------------------- import


def prepare_out_dir(out_dir: str, names: Iterable[str], overwrite: bool) -> None:
    os.makedirs(out_dir, exist_ok=True)
    existing = [n for n in names if os.path.exists(os.path.join(out_dir, n))]
    if existing and not overwrite:
        raise ImportRefused(f"{out_dir}: {', '.join(existing)} already there; pass --overwrite to replace")


def import_hf_bart(hf_dir: str, out_dir: str, overwrite: bool = False, tokenizer_dir: Optional[str] = None) -> Dict:
    """Convert a Hugging Face BART directory; returns a summary (the commands
    that follow included)."""
    if not os.path.isdir(hf_dir):
        raise ImportRefused(f"{hf_dir}: not a directory (expected a Hugging Face model directory)")
    config_path = os.path.join(hf_dir, "config.json")
    config = read_json(config_path, "the model configuration")
    shape = bart_shape(config, config_path)
    state, weights_path = load_hf_weights(hf_dir)
    fairseq_state = fairseq_state_from_hf(state, shape, weights_path)
    num_rows = fairseq_state["decoder.embed_tokens.weight"].size(0)
    config_rows = config.get("vocab_size", num_rows)
    if config_rows != num_rows:
        raise ImportRefused(f"{config_path}: vocab_size {config_rows} but {weights_path} has {num_rows} embedding rows")
    files = bpe_files(tokenizer_dir or hf_dir, num_rows)
    arch, flags = architecture_flags(shape)
    args = checkpoint_namespace(shape, arch, flags)

    from mdsfair.importers.fairseq_bart import save_fairseq_checkpoint

    prepare_out_dir(out_dir, ("model.pt", "dict.txt", "encoder.json", "vocab.bpe"), overwrite)
    files.write(out_dir)
    save_fairseq_checkpoint(os.path.join(out_dir, "model.pt"), args, fairseq_state)
    generate, generation_notes = generation_flags(hf_dir)
    notes = list(generation_notes)
    if shape.scale_embedding:
        notes.append(
            f"scale_embedding: sqrt(d_model) = {shape.embed_scale:g} folded into the token embedding"
            + (" and 1/sqrt(d_model) into the last decoder final LayerNorm" if shape.tied_output else "")
        )
    if not shape.tied_output:
        notes.append(
            "untied lm_head: exact with fairseq-generate --path and the hub; fairseq's bart_* architectures tie "
            "the output projection to the embedding, so --restore-file into them would replace the head"
        )
    return {
        "source": weights_path,
        "out_dir": out_dir,
        "arch": arch,
        "arch_flags": training_flags(shape, flags),
        "generate_flags": generate,
        "dictionary_size": num_rows,
        "mask": MASK in files.symbols,
        "notes": notes,
    }


def print_summary(summary: Dict, out=None) -> None:
    out = out or sys.stdout
    out_dir = summary["out_dir"]
    print(f"converted {summary['source']}", file=out)
    print(f"wrote {out_dir}/model.pt (arch {summary['arch']}), dict.txt ({summary['dictionary_size']} symbols"
          f"{', <mask> included' if summary['mask'] else ''}), encoder.json, vocab.bpe", file=out)
    for note in summary["notes"]:
        print(f"note: {note}", file=out)
    print_next_preprocess_command(out_dir, out)
    print(f"  fairseq-train DATA --user-dir mdsfair --task multidoc_summarization --arch {summary['arch']} "
          f"{' '.join(summary['arch_flags'])} --restore-file {out_dir}/model.pt --reset-optimizer --reset-dataloader "
          "--reset-meters ...", file=out)
    print(f"  fairseq-generate DATA --user-dir mdsfair --task multidoc_summarization --path {out_dir}/model.pt "
          f"{' '.join(summary['generate_flags'])}", file=out)


def print_next_preprocess_command(out_dir: str, out) -> None:
    """Print "next:" and the mdsfair-preprocess command that uses an import's GPT-2 files."""
    print("next:", file=out)
    print(f"  mdsfair-preprocess --input-dir RAW --destdir DATA --subword gpt2 --gpt2-encoder-json {out_dir}/encoder.json "
          f"--gpt2-vocab-bpe {out_dir}/vocab.bpe --dict {out_dir}/dict.txt", file=out)


def cli_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mdsfair-import hf-bart",
        description="Convert a Hugging Face BART model directory into a fairseq BART checkpoint (model.pt) and the "
                    "GPT-2 BPE files of mdsfair-preprocess (dict.txt, encoder.json, vocab.bpe) that reproduce the "
                    "Hugging Face tokenizer's ids.",
    )
    parser.add_argument("hf_dir", help="Hugging Face model directory: config.json, model.safetensors or "
                                       "pytorch_model.bin (or their sharded index), vocab.json, merges.txt")
    parser.add_argument("out_dir", help="where model.pt, dict.txt, encoder.json and vocab.bpe are written")
    parser.add_argument("--tokenizer-dir", help="directory with vocab.json and merges.txt when not in HF_DIR")
    parser.add_argument("--overwrite", action="store_true", help="replace files already in OUT_DIR")
    args = parser.parse_args(argv)
    try:
        summary = import_hf_bart(args.hf_dir, args.out_dir, overwrite=args.overwrite, tokenizer_dir=args.tokenizer_dir)
    except ImportRefused as error:
        print(f"mdsfair-import hf-bart: {error}", file=sys.stderr)
        return 1
    print_summary(summary)
    return 0


# ------------------------------------------------------------------- export


HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "gelu_accurate": "gelu_new", "gelu_fast": "gelu_new"}


def _cfg_get(cfg, name, default=None):
    value = getattr(cfg, name, default) if not isinstance(cfg, dict) else cfg.get(name, default)
    return default if value is None else value


def check_exportable(model_cfg, path: str) -> None:
    """Refuse a checkpoint Hugging Face's BART cannot compute."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = _cfg_get(model_cfg, "_name") or _cfg_get(model_cfg, "arch")
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    from fairseq.models.bart import BARTModel

    if model_class is not BARTModel:
        raise ImportRefused(
            f"{path}: arch {arch!r} is not a plain fairseq bart architecture; only bart_* checkpoints export to "
            "Hugging Face BART (the mdsfair models compute something BART does not)"
        )
    problems = []
    for name, required in (
        ("encoder_normalize_before", False),
        ("decoder_normalize_before", False),
        ("layernorm_embedding", True),
        ("encoder_learned_pos", True),
        ("decoder_learned_pos", True),
        ("no_token_positional_embeddings", False),
        ("cross_self_attention", False),
    ):
        if bool(_cfg_get(model_cfg, name, required)) != required:
            problems.append(f"{name}={_cfg_get(model_cfg, name)}")
    if _cfg_get(model_cfg, "adaptive_softmax_cutoff"):
        problems.append("adaptive softmax")
    embed_dim = _cfg_get(model_cfg, "encoder_embed_dim")
    for name in ("decoder_embed_dim", "decoder_output_dim", "decoder_input_dim"):
        if _cfg_get(model_cfg, name, embed_dim) != embed_dim:
            problems.append(f"{name}={_cfg_get(model_cfg, name)} != encoder_embed_dim {embed_dim}")
    if _cfg_get(model_cfg, "activation_fn", "gelu") not in HF_ACTIVATIONS:
        problems.append(f"activation_fn={_cfg_get(model_cfg, 'activation_fn')}")
    if problems:
        raise ImportRefused(f"{path}: not expressible as Hugging Face BART: {', '.join(problems)}")


def hf_state_from_fairseq(state: Dict, path: str) -> Tuple["OrderedDict", bool, Dict[str, int]]:
    """Hugging Face ``BartForConditionalGeneration`` state dict from a fairseq
    bart state dict; returns it, whether the head is tied, and the layer counts."""
    import torch

    encoder_embedding = state["encoder.embed_tokens.weight"]
    decoder_embedding = state.get("decoder.embed_tokens.weight", encoder_embedding)
    projection = state.get("decoder.output_projection.weight", decoder_embedding)
    tied = torch.equal(encoder_embedding, decoder_embedding) and torch.equal(projection, decoder_embedding)
    out = OrderedDict()
    out["model.shared.weight"] = encoder_embedding
    if not tied:
        # tie_word_embeddings=false: Hugging Face (>= 5) reads each embedding from its own key.
        out["model.encoder.embed_tokens.weight"] = encoder_embedding
        out["model.decoder.embed_tokens.weight"] = decoder_embedding
        out["lm_head.weight"] = projection
    used = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight",
            "encoder.version", "decoder.version"}
    layers = {}
    for part, modules in (("encoder", ENCODER_LAYER_MODULES), ("decoder", DECODER_LAYER_MODULES)):
        count = 1 + max((int(k.split(".")[2]) for k in state if k.startswith(f"{part}.layers.")), default=-1)
        layers[part] = count
        keys = [f"{part}.embed_positions.weight", *layer_keys(f"{part}.layernorm_embedding")]
        for layer in range(count):
            for module in modules:
                keys += layer_keys(f"{part}.layers.{layer}.{module}")
        for key in keys:
            if key not in state:
                raise ImportRefused(f"{path}: {key} is missing")
            out["model." + key] = state[key]
            used.add(key)
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise ImportRefused(f"{path}: weights Hugging Face BART has no place for: {', '.join(unexpected[:6])}")
    out["final_logits_bias"] = torch.zeros(1, encoder_embedding.size(0), dtype=encoder_embedding.dtype)
    return out, tied, layers


def hf_vocabulary(dict_path: str, encoder_json: str, num_rows: int) -> Dict[str, int]:
    """``vocab.json`` (token -> id = fairseq index) from a GPT-2 ``dict.txt`` and ``encoder.json``."""
    from fairseq.data import Dictionary

    encoder = read_json(encoder_json, "GPT-2 encoder")
    decoder = {int(i): token for token, i in encoder.items()}
    dictionary = Dictionary.load(dict_path)
    if len(dictionary) not in (num_rows, num_rows - 1):
        raise ImportRefused(
            f"{dict_path}: {len(dictionary)} symbols for a model with {num_rows} embedding rows; give the dict.txt "
            "the checkpoint was trained with"
        )
    vocab: Dict[str, int] = {}
    for index, symbol in enumerate(dictionary.symbols):
        line = index - len(SPECIAL_SYMBOLS) + 1
        if index < len(SPECIAL_SYMBOLS) or symbol == MASK or symbol.startswith("madeupword"):
            token = symbol
        elif symbol.isdigit():
            if int(symbol) not in decoder:
                raise ImportRefused(f"{dict_path}:{line}: id {symbol} is not in {encoder_json}")
            token = decoder[int(symbol)]
        else:
            raise ImportRefused(
                f"{dict_path}:{line}: symbol {symbol!r} is not a GPT-2 BPE id; only GPT-2 BPE dictionaries "
                "export to Hugging Face BART"
            )
        if token in vocab:
            raise ImportRefused(f"{dict_path}: token {token!r} appears twice")
        vocab[token] = index
    if len(dictionary) == num_rows - 1:
        if MASK in vocab:
            raise ImportRefused(f"{dict_path}: one row short of the model and <mask> already present")
        vocab[MASK] = num_rows - 1  # the denoising task's <mask> row, kept in the checkpoint
    return vocab


def export_hf_bart(
    checkpoint: str,
    dict_path: str,
    out_dir: str,
    encoder_json: Optional[str] = None,
    vocab_bpe: Optional[str] = None,
    weights_format: str = "safetensors",
    overwrite: bool = False,
) -> Dict:
    """Write a Hugging Face BART directory for a plain fairseq ``bart_*`` checkpoint."""
    import mdsfair
    from fairseq import checkpoint_utils

    mdsfair.register()  # checkpoint checks and weights_only allow-list for fairseq checkpoints

    if not os.path.isfile(checkpoint):
        raise ImportRefused(f"{checkpoint}: missing (the fairseq checkpoint)")
    if not os.path.isfile(dict_path):
        raise ImportRefused(f"{dict_path}: missing (the dict.txt the checkpoint was trained with)")
    here = os.path.dirname(os.path.abspath(dict_path))
    encoder_json = encoder_json or os.path.join(here, "encoder.json")
    vocab_bpe = vocab_bpe or os.path.join(here, "vocab.bpe")
    for path, flag in ((encoder_json, "--gpt2-encoder-json"), (vocab_bpe, "--gpt2-vocab-bpe")):
        if not os.path.isfile(path):
            raise ImportRefused(f"{path}: missing; give the GPT-2 BPE file of this dictionary with {flag}")
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    model_cfg = state["cfg"]["model"] if state.get("cfg") is not None else state["args"]
    check_exportable(model_cfg, checkpoint)
    hf_state, tied, layers = hf_state_from_fairseq(state["model"], checkpoint)
    num_rows, d_model = hf_state["model.shared.weight"].shape
    positions = hf_state["model.encoder.embed_positions.weight"].size(0) - 2
    if hf_state["model.decoder.embed_positions.weight"].size(0) - 2 != positions:
        raise ImportRefused(f"{checkpoint}: encoder and decoder position tables differ in size; Hugging Face BART has one size")
    vocab = hf_vocabulary(dict_path, encoder_json, num_rows)
    merges = read_merges(vocab_bpe)
    config = {
        "model_type": "bart",
        "architectures": ["BartForConditionalGeneration"],
        "vocab_size": num_rows,
        "d_model": d_model,
        "encoder_layers": layers["encoder"],
        "decoder_layers": layers["decoder"],
        "encoder_attention_heads": _cfg_get(model_cfg, "encoder_attention_heads"),
        "decoder_attention_heads": _cfg_get(model_cfg, "decoder_attention_heads"),
        "encoder_ffn_dim": _cfg_get(model_cfg, "encoder_ffn_embed_dim"),
        "decoder_ffn_dim": _cfg_get(model_cfg, "decoder_ffn_embed_dim"),
        "max_position_embeddings": positions,
        "activation_function": HF_ACTIVATIONS[_cfg_get(model_cfg, "activation_fn", "gelu")],
        "dropout": _cfg_get(model_cfg, "dropout", 0.1),
        "attention_dropout": _cfg_get(model_cfg, "attention_dropout", 0.0),
        "activation_dropout": _cfg_get(model_cfg, "activation_dropout", 0.0),
        "encoder_layerdrop": _cfg_get(model_cfg, "encoder_layerdrop", 0.0),
        "decoder_layerdrop": _cfg_get(model_cfg, "decoder_layerdrop", 0.0),
        "scale_embedding": not _cfg_get(model_cfg, "no_scale_embedding", True),
        "tie_word_embeddings": tied,
        "is_encoder_decoder": True,
        "bos_token_id": 0,
        "pad_token_id": 1,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_eos_token_id": 2,
    }
    names = ["config.json", "vocab.json", "merges.txt", "tokenizer_config.json",
             "model.safetensors" if weights_format == "safetensors" else "pytorch_model.bin"]
    prepare_out_dir(out_dir, names, overwrite)
    write_json_atomic(os.path.join(out_dir, "config.json"), config, indent=2)
    write_json_atomic(os.path.join(out_dir, "vocab.json"), vocab, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(merge + "\n" for merge in merges))
    write_json_atomic(
        os.path.join(out_dir, "tokenizer_config.json"),
        {"tokenizer_class": "BartTokenizer", "model_max_length": positions, "add_prefix_space": False,
         "errors": "replace", "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
         "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": MASK},
        indent=2,
    )
    tensors = {name: tensor.contiguous().clone() for name, tensor in hf_state.items()}
    if weights_format == "safetensors":
        try:
            from safetensors.torch import save_file
        except ImportError as error:
            raise ImportRefused("writing model.safetensors needs the safetensors package; pass --weights-format bin") from error
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        import torch

        torch.save(tensors, os.path.join(out_dir, "pytorch_model.bin"))
    return {"out_dir": out_dir, "config": config, "files": names}


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mdsfair-export hf-bart",
        description="Write a Hugging Face BART model directory (config.json, weights, vocab.json, merges.txt, "
                    "tokenizer_config.json) for a plain fairseq bart_* checkpoint.",
    )
    parser.add_argument("checkpoint", help="fairseq checkpoint of a bart_* architecture (e.g. checkpoints/checkpoint_best.pt)")
    parser.add_argument("dict", help="the dict.txt it was trained with (e.g. data-bin/dict.txt)")
    parser.add_argument("out_dir", help="the Hugging Face model directory to write")
    parser.add_argument("--gpt2-encoder-json", help="GPT-2 encoder.json of the dictionary (default: next to DICT)")
    parser.add_argument("--gpt2-vocab-bpe", help="GPT-2 vocab.bpe of the dictionary (default: next to DICT)")
    parser.add_argument("--weights-format", choices=("safetensors", "bin"), default="safetensors",
                        help="model.safetensors (default) or pytorch_model.bin")
    parser.add_argument("--overwrite", action="store_true", help="replace files already in OUT_DIR")
    args = parser.parse_args(argv)
    try:
        summary = export_hf_bart(args.checkpoint, args.dict, args.out_dir, args.gpt2_encoder_json,
                                 args.gpt2_vocab_bpe, args.weights_format, args.overwrite)
    except ImportRefused as error:
        print(f"mdsfair-export hf-bart: {error}", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(summary['files'])} to {summary['out_dir']}")
    return 0
