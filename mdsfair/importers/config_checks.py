"""The sizes an imported configuration states, checked before anything is
written: each is an integer (a JSON integer, not ``"16x"``, ``16.5``,
``1e12`` or ``true``) in its range, and each matches the shapes of the
tensors it describes.

A configuration is only a description of its weights: ``d_model`` is the
width of every embedding row and layer, ``encoder_ffn_dim`` the rows of
every encoder ``fc1.weight``, ``encoder_layers`` the number of encoder
layers the file holds, ``vocab_size`` the embedding rows,
``max_position_embeddings`` the rows of a position table (plus its offset
rows: BART's learned positions keep two), and the attention heads split
``d_model`` evenly. A size that disagrees with the tensors would either fail
far from its cause or, worse, be written into a checkpoint whose model
cannot be built (an ``encoder_ffn_dim`` of 10^12 next to 40-wide weights
asks for terabytes when the checkpoint loads); so every importer reads its
configuration through :func:`config_integer` and compares it with the
tensors (:func:`check_encoder_decoder_weights` for the BART-shaped ones:
Hugging Face BART, LED / PRIMERA, PageSum, and fairseq BART checkpoints)
before it converts anything. Each refusal is one line naming the file, the
key, the configuration's value and the tensor's shape.

Hugging Face's configurations accept aliases of some keys
(``PretrainedConfig.attribute_map``: ``num_attention_heads`` for
``encoder_attention_heads``, ``hidden_size`` for ``d_model``,
``num_hidden_layers`` for ``encoder_layers``), the alias winning when both
are given; :data:`HF_ALIASES` reads them the same way and refuses a file
whose alias and key disagree, since which one the model was trained with is
then not clear.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

from mdsfair.importers import ImportRefused

#: ``PretrainedConfig.attribute_map`` of ``BartConfig`` and ``LEDConfig``: alias -> key.
HF_ALIASES = {
    "num_attention_heads": "encoder_attention_heads",
    "hidden_size": "d_model",
    "num_hidden_layers": "encoder_layers",
}

_REQUIRED = object()


def shown(value) -> str:
    """A configuration value as its file writes it (JSON), for messages."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def checked_integer(value, name: str, path: str, minimum: int = 1) -> int:
    """``value`` (the ``name`` of the configuration at ``path``) as an int:
    refused unless it is an integer (not a bool, a float, a string) of at
    least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = {bool: "a boolean", float: "a fractional number", str: "a string"}.get(type(value), type(value).__name__)
        raise ImportRefused(f"{path}: {name} must be an integer, got {shown(value)} ({kind})")
    if value < minimum:
        raise ImportRefused(f"{path}: {name} must be at least {minimum}, got {value}")
    return int(value)


def config_value(config: Mapping, key: str, path: str, aliases: Mapping[str, str] = HF_ALIASES, default=_REQUIRED):
    """``config[key]``, or the value of its alias (see the module docstring);
    refused when missing without a default, or when key and alias disagree."""
    alias = next((a for a, target in aliases.items() if target == key and a in config), None)
    if alias is not None:
        if key in config and config[key] != config[alias]:
            raise ImportRefused(
                f"{path}: {alias} {shown(config[alias])} and {key} {shown(config[key])} disagree "
                f"(Hugging Face reads {alias} as {key}); give one value"
            )
        return config[alias]
    if key in config:
        return config[key]
    if default is _REQUIRED:
        raise ImportRefused(f"{path}: {key} is missing")
    return default


def config_integer(
    config: Mapping,
    key: str,
    path: str,
    minimum: int = 1,
    default=_REQUIRED,
    aliases: Mapping[str, str] = HF_ALIASES,
    prefix: str = "",
) -> int:
    """The integer size ``key`` of ``config`` (read from ``path``), checked
    by :func:`checked_integer`; ``prefix`` is how messages name the mapping
    (``opt.`` for a checkpoint's options)."""
    return checked_integer(config_value(config, key, path, aliases, default), prefix + key, path, minimum)


def check_divides(path: str, heads_name: str, heads: int, width_name: str, width: int) -> None:
    """Attention heads split the model width evenly, or the file is refused."""
    if width % heads:
        raise ImportRefused(
            f"{path}: {heads_name} {heads} does not divide {width_name} {width} (each head takes "
            f"{width_name} / {heads_name} of the width)"
        )


def check_dimension(path: str, name: str, value: int, weights_path: str, tensor_name: str, tensor, dim: int) -> None:
    """Dimension ``dim`` of ``tensor`` (``tensor_name`` in ``weights_path``)
    is the size ``name`` = ``value`` of the configuration at ``path``."""
    shape = tuple(tensor.shape)
    if len(shape) <= dim or shape[dim] != value:
        raise ImportRefused(
            f"{path}: {name} {value} does not match the weights: {tensor_name} in {weights_path} has shape {shape}"
        )


# ------------------------------------------------------------ encoder-decoder


#: The roles of an encoder-decoder configuration's sizes; the keys naming them
#: differ by format (Hugging Face's ``d_model``, fairseq's ``encoder_embed_dim``).
ROLES = ("width", "encoder_layers", "decoder_layers", "encoder_heads", "decoder_heads", "encoder_ffn", "decoder_ffn")
HF_BART_KEYS = {
    "width": "d_model",
    "encoder_layers": "encoder_layers",
    "decoder_layers": "decoder_layers",
    "encoder_heads": "encoder_attention_heads",
    "decoder_heads": "decoder_attention_heads",
    "encoder_ffn": "encoder_ffn_dim",
    "decoder_ffn": "decoder_ffn_dim",
}
FAIRSEQ_BART_KEYS = {
    "width": "encoder_embed_dim",
    "encoder_layers": "encoder_layers",
    "decoder_layers": "decoder_layers",
    "encoder_heads": "encoder_attention_heads",
    "decoder_heads": "decoder_attention_heads",
    "encoder_ffn": "encoder_ffn_embed_dim",
    "decoder_ffn": "decoder_ffn_embed_dim",
}


@dataclass(frozen=True)
class EncoderDecoderSizes:
    """The sizes of a BART-shaped configuration at ``path``: role -> ``(key,
    value)`` (:data:`ROLES`, ``vocabulary`` when the file states it, and
    ``{part}_positions`` for each position table it states), and the offset
    rows of the position tables in the weights (BART: 2, LED: 0)."""

    path: str
    sizes: Dict[str, Tuple[str, int]]
    position_offset: int = 2
    prefix: str = field(default="")

    def value(self, role: str) -> int:
        return self.sizes[role][1]

    def named(self, role: str) -> str:
        key, value = self.sizes[role]
        return f"{self.prefix}{key} {value}"


def read_encoder_decoder_sizes(
    config: Mapping,
    path: str,
    position_keys: Mapping[str, str],
    keys: Mapping[str, str] = HF_BART_KEYS,
    position_offset: int = 2,
    vocabulary_key: Optional[str] = "vocab_size",
    prefix: str = "",
    aliases: Mapping[str, str] = HF_ALIASES,
) -> EncoderDecoderSizes:
    """Every size of :data:`ROLES` (named by ``keys``), the position tables
    (``position_keys``: part -> key) and the vocabulary (when present) as
    checked integers; the heads must divide the width."""
    sizes = {
        role: (keys[role], config_integer(config, keys[role], path, aliases=aliases, prefix=prefix)) for role in ROLES
    }
    for part, key in position_keys.items():
        sizes[f"{part}_positions"] = (key, config_integer(config, key, path, aliases=aliases, prefix=prefix))
    if vocabulary_key is not None and config_value(config, vocabulary_key, path, aliases, None) is not None:
        sizes["vocabulary"] = (
            vocabulary_key,
            config_integer(config, vocabulary_key, path, aliases=aliases, prefix=prefix),
        )
    result = EncoderDecoderSizes(path, sizes, position_offset, prefix)
    for part in ("encoder", "decoder"):
        check_divides(
            path,
            prefix + keys[f"{part}_heads"],
            result.value(f"{part}_heads"),
            prefix + keys["width"],
            result.value("width"),
        )
    return result


def weights_prefix(state: Mapping) -> str:
    """The prefix of a BART-shaped state dict's encoder and decoder keys:
    ``model.`` (``BartForConditionalGeneration``, PageSum), ``led.``
    (``LEDForConditionalGeneration``) or none (``BartModel``, fairseq)."""
    for prefix in ("model.", "led."):
        if any(key.startswith(prefix + "encoder.") or key == prefix + "shared.weight" for key in state):
            return prefix
    return ""


def layer_indices(state: Mapping, stem: str) -> Sequence[int]:
    """The layer numbers ``N`` of the keys ``{stem}.N.*`` in ``state``, sorted."""
    pattern = re.compile(re.escape(stem) + r"\.(\d+)\.")
    return sorted({int(match.group(1)) for match in map(pattern.match, state) if match})


def check_layer_count(sizes_path: str, name: str, value: int, state: Mapping, stem: str, weights_path: str) -> None:
    """``value`` layers stated, and exactly the layers ``0 .. value-1`` under
    ``stem`` in the weights."""
    present = layer_indices(state, stem)
    if present != list(range(value)):
        held = (
            f"layers {present[0]}-{present[-1]}"
            if present == list(range(len(present))) and present
            else f"the layers {present[:8]}"
            if present
            else "no layers"
        )
        raise ImportRefused(
            f"{sizes_path}: {name} does not match the weights: {weights_path} holds {held} under "
            f"{stem}.N ({len(present)} layers)"
        )


def check_shape(sizes: EncoderDecoderSizes, weights_path: str, name: str, tensor, expected: Sequence) -> None:
    """``tensor`` (``name`` in ``weights_path``) has the shape ``expected``:
    each entry a role of ``sizes`` (its value, with ``+ offset`` for
    ``("..._positions", offset)``) or a plain number; a mismatch names the
    role's key and value and the tensor's shape."""
    shape = tuple(tensor.shape)
    dims = []
    for entry in expected:
        role, extra = entry if isinstance(entry, tuple) else (entry, 0)
        dims.append((role, sizes.value(role) + extra if isinstance(role, str) else role + extra, extra))
    if len(shape) == len(dims) and all(actual == want for actual, (_, want, _) in zip(shape, dims)):
        return
    if len(shape) == len(dims):
        for actual, (role, want, extra) in zip(shape, dims):
            if actual != want and isinstance(role, str):
                rows = f" (expected {sizes.sizes[role][0]} + {extra} = {want} rows)" if extra else ""
                raise ImportRefused(
                    f"{sizes.path}: {sizes.named(role)} does not match the weights: {name} in "
                    f"{weights_path} has shape {shape}{rows}"
                )
    raise ImportRefused(
        f"{weights_path}: {name} has shape {shape}, but {sizes.path} describes {tuple(want for _, want, _ in dims)}"
    )


def check_encoder_decoder_weights(sizes: EncoderDecoderSizes, state: Mapping, weights_path: str) -> None:
    """Compare a BART-shaped state dict (Hugging Face's BART or LED names, or
    fairseq's) with the sizes of its configuration, before any conversion:
    the embeddings' rows and width, the layers present, every layer
    tensor's shape (``fc1`` / ``fc2`` by the feed-forward size, every other
    matrix ``width x width``, every vector ``width``) and the position
    tables' rows."""
    prefix = weights_prefix(state)
    vocabulary = "vocabulary" if "vocabulary" in sizes.sizes else None
    for name in (
        prefix + "shared.weight",
        prefix + "encoder.embed_tokens.weight",
        prefix + "decoder.embed_tokens.weight",
        "lm_head.weight",
        "decoder.output_projection.weight",
    ):
        if name in state:
            rows = vocabulary or state[name].shape[0]
            check_shape(sizes, weights_path, name, state[name], (rows, "width"))
    for part in ("encoder", "decoder"):
        stem = f"{prefix}{part}.layers"
        check_layer_count(
            sizes.path, sizes.named(f"{part}_layers"), sizes.value(f"{part}_layers"), state, stem, weights_path
        )
        ffn = f"{part}_ffn"
        for name, tensor in state.items():
            if not name.startswith(stem + ".") or tensor.dim() not in (1, 2):
                continue
            if name.endswith(".fc1.weight"):
                expected = (ffn, "width")
            elif name.endswith(".fc1.bias"):
                expected = (ffn,)
            elif name.endswith(".fc2.weight"):
                expected = ("width", ffn)
            else:
                expected = ("width",) * tensor.dim()
            check_shape(sizes, weights_path, name, tensor, expected)
        for name in (f"{prefix}{part}.layernorm_embedding.weight", f"{prefix}{part}.layernorm_embedding.bias"):
            if name in state:
                check_shape(sizes, weights_path, name, state[name], ("width",))
        positions = f"{prefix}{part}.embed_positions.weight"
        if f"{part}_positions" in sizes.sizes and positions in state:
            check_shape(
                sizes,
                weights_path,
                positions,
                state[positions],
                ((f"{part}_positions", sizes.position_offset), "width"),
            )
