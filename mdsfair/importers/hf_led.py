"""Hugging Face LED / PRIMERA <-> mdsfair's ``led`` model.

``mdsfair-import hf-led HF_DIR OUT_DIR`` reads a Hugging Face
``LEDForConditionalGeneration`` directory in the layout of
``allenai/led-base-16384``, ``allenai/led-large-16384``, ``allenai/PRIMERA``
and ``allenai/PRIMERA-multinews`` (``config.json`` with ``model_type: led``;
``model.safetensors`` or ``pytorch_model.bin``, single or sharded;
``vocab.json``, ``merges.txt``; PRIMERA's ``<doc-sep>`` in
``added_tokens.json`` / ``tokenizer.json`` / ``tokenizer_config.json``'s
``added_tokens_decoder``, or only among the ``additional_special_tokens`` of
``special_tokens_map.json`` / ``tokenizer_config.json``, which gives it the
next id after ``vocab.json`` as Hugging Face does when it loads them; an
embedding row that no file names is refused), or names such a model on the
Hugging Face Hub (``allenai/PRIMERA-multinews``, :mod:`mdsfair.importers.hf_hub`),
and writes, as ``mdsfair-import hf-bart`` does (:mod:`mdsfair.importers.hf_bart`):

* ``OUT_DIR/model.pt``: an ``led`` checkpoint (``--arch led_base``,
  ``led_large`` or ``primera``, plus the flags that make it exactly the
  Hugging Face configuration), loadable by ``fairseq-generate --path`` and
  ``load_model_ensemble_and_task``;
* ``OUT_DIR/mdsfair.json``: a data-bin manifest without splits (GPT-2
  subwords, the files above), so that ``load_model_ensemble_and_task(
  [OUT_DIR/model.pt], arg_overrides={"data": OUT_DIR})`` and the hub load
  the model with its dictionary before any data is preprocessed;
* ``OUT_DIR/dict.txt``, ``encoder.json``, ``vocab.bpe`` for
  ``mdsfair-preprocess --subword gpt2``: the ids it writes are the Hugging
  Face tokenizer's. PRIMERA's ``<doc-sep>`` (id 50,265, its vocabulary's
  50,266th row) is the dictionary symbol ``<doc-sep>`` at that index; the
  GPT-2 encoder never produces it from text: PRIMERA's source layout
  inserts it by id after every document (allenai/PRIMER
  ``script/dataloader.py``, :mod:`mdsfair.data.primera_layout`), recorded in
  a data-bin by ``mdsfair-preprocess --source-layout primera --dict
  OUT_DIR/dict.txt`` (the import prints that command) and in
  ``OUT_DIR/mdsfair.json``.

What the checkpoint records, from ``config.json`` (Hugging Face
``LEDConfig``):

* ``--attention-window``: ``attention_window``, one value or one per encoder
  layer (``transformers/models/led/configuration_led.py``);
* ``--max-encoder-positions`` / ``--max-source-positions``:
  ``max_encoder_position_embeddings`` (16,384 for LED, 4,096 for PRIMERA);
  ``--max-target-positions``: ``max_decoder_position_embeddings`` (1,024);
* ``--global-attention doc-sep`` and ``--source-layout primera`` when the
  tokenizer has ``<doc-sep>`` (PRIMERA: global attention on ``<s>`` and every
  ``<doc-sep>``, ``script/primer_hf_main.py``), else ``first`` (LED's
  summarization setting, ``global_attention_mask[:, 0] = 1``).

Weights map by :func:`mdsfair.modules.led_parameter_map.led_state_dict_from_hf` (the table
in :mod:`mdsfair.models.led`); the configuration is checked with
:func:`mdsfair.importers.hf_bart.bart_shape` (LED is BART's post-LayerNorm
transformer with Longformer encoder attention and no embedding scaling).
``final_logits_bias`` must be zero (Hugging Face registers it as a buffer
that training leaves at zero; fairseq's projection has no bias).

``mdsfair-export hf-led CKPT DICT OUT_DIR`` is the reverse for ``led``
checkpoints: ``config.json``, the weights, ``vocab.json``, ``merges.txt``,
``tokenizer_config.json`` and, when the dictionary has ``<doc-sep>``,
``added_tokens.json`` ``{"<doc-sep>": id}`` as PRIMERA ships it.
"""

import os
import shutil
import tempfile
from collections import OrderedDict
from typing import Dict, List, Optional

from mdsfair.data.manifest import write_json_atomic
from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import check_encoder_decoder_weights
from mdsfair.importers.hf_bart import (
    MASK,
    architecture_flags,
    bart_shape,
    bpe_files,
    checkpoint_namespace,
    generation_flags,
    hf_vocabulary,
    load_hf_weights,
    print_import_summary,
    read_json,
    read_merges,
    run_import_cli,
    source_record,
)
from mdsfair.importers.hf_bart_files import check_prefix_space
from mdsfair.importers.hf_bart_weights import EMBEDDING_KEYS, HF_ACTIVATIONS, cfg_value, fairseq_embeddings
from mdsfair.importers.hf_export import HFDirectory, export_hf_directory, hf_config, run_export_cli, tokenizer_config
from mdsfair.importers.hf_hub import found_where, resolve_model_source
from mdsfair.modules.led_parameter_map import (
    FAIRSEQ_TO_HF_ENCODER_ATTENTION,
    led_state_dict_from_hf,
    rename_encoder_attention,
)

DOC_SEP = "<doc-sep>"
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", MASK)
OUT_FILES = ("model.pt", "dict.txt", "encoder.json", "vocab.bpe", "mdsfair.json")


# --------------------------------------------------------------- tokenizer


def added_tokens(tokenizer_dir: str) -> Dict[str, int]:
    """Tokens a Hugging Face tokenizer adds beyond ``vocab.json``, from
    ``added_tokens.json`` (slow tokenizers, PRIMERA's files),
    ``tokenizer.json``'s ``added_tokens`` and ``tokenizer_config.json``'s
    ``added_tokens_decoder`` (transformers >= 4.34); refused when two of them
    disagree on an id."""
    found: Dict[str, int] = {}
    where: Dict[str, str] = {}

    def add(token, token_id, path):
        if token in found and found[token] != token_id:
            raise ImportRefused(f"{path}: {token!r} has id {token_id}, but {where[token]} gives {found[token]}")
        found[token], where[token] = int(token_id), path

    path = os.path.join(tokenizer_dir, "added_tokens.json")
    if os.path.isfile(path):
        for token, token_id in read_json(path, "added tokens", dict).items():
            add(token, token_id, path)
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    if os.path.isfile(path):
        for entry in read_json(path, "tokenizer", dict).get("added_tokens") or []:
            add(entry.get("content"), entry.get("id"), path)
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    if os.path.isfile(path):
        for token_id, entry in (read_json(path, "tokenizer config", dict).get("added_tokens_decoder") or {}).items():
            add(entry.get("content"), int(token_id), path)
    return found


#: The files whose ``additional_special_tokens`` a Hugging Face tokenizer adds
#: when it loads (``special_tokens_map.json`` as ``save_pretrained`` and
#: PRIMERA's release write it; ``tokenizer_config.json`` in newer files).
SPECIAL_TOKEN_FILES = ("special_tokens_map.json", "tokenizer_config.json")


def additional_special_tokens(tokenizer_dir: str) -> List[str]:
    """The ``additional_special_tokens`` of :data:`SPECIAL_TOKEN_FILES`, in
    order, each once (an entry is a string or an ``AddedToken`` object with
    ``content``). allenai/PRIMER's loader (``script/primer_hf_main.py``)
    gives its tokenizer ``<doc-sep>`` this way, so a directory may name it
    here and nowhere else."""
    tokens: List[str] = []
    for name in SPECIAL_TOKEN_FILES:
        path = os.path.join(tokenizer_dir, name)
        if not os.path.isfile(path):
            continue
        entries = read_json(path, "special tokens", dict).get("additional_special_tokens") or []
        if not isinstance(entries, list):
            raise ImportRefused(f"{path}: additional_special_tokens must be a list, got {entries!r}")
        for entry in entries:
            token = entry.get("content") if isinstance(entry, dict) else entry
            if not isinstance(token, str):
                raise ImportRefused(f"{path}: additional_special_tokens entry {entry!r} is not a token")
            if token not in tokens:
                tokens.append(token)
    return tokens


def tokenizer_extra_tokens(tokenizer_dir: str, vocab: Dict[str, int]) -> Dict[str, int]:
    """:func:`added_tokens`, plus the ``additional_special_tokens`` that have
    no id there nor in ``vocab.json``, with the ids a Hugging Face tokenizer
    gives them when it adds them on loading: the next ones after the
    vocabulary and the tokens already added, in their order."""
    extra = added_tokens(tokenizer_dir)
    next_id = max([len(vocab) - 1, *vocab.values(), *extra.values()]) + 1
    for token in additional_special_tokens(tokenizer_dir):
        if token not in extra and token not in vocab:
            extra[token] = next_id
            next_id += 1
    return extra


def led_bpe_files(tokenizer_dir: str, num_rows: int):
    """The GPT-2 files of :func:`mdsfair.importers.hf_bart.bpe_files`, with
    PRIMERA's ``<doc-sep>`` as a dictionary symbol at its id. Returns the
    files and the ``<doc-sep>`` id (``None`` for LED)."""
    vocab_path = os.path.join(tokenizer_dir, "vocab.json")
    vocab = read_json(vocab_path, "the tokenizer vocabulary", dict)
    extra = tokenizer_extra_tokens(tokenizer_dir, vocab)
    for token, token_id in extra.items():
        if token in SPECIALS or token == DOC_SEP:
            if token in vocab and vocab[token] != token_id:
                raise ImportRefused(
                    f"{tokenizer_dir}: {token!r} has id {token_id} in the tokenizer but {vocab[token]} in {vocab_path}"
                )
            continue
        raise ImportRefused(
            f"{tokenizer_dir}: the tokenizer adds {token!r} (id {token_id}); only PRIMERA's {DOC_SEP} is supported "
            "beyond vocab.json (mdsfair-preprocess's GPT-2 encoder cannot reproduce other added tokens)"
        )
    check_prefix_space(tokenizer_dir, models="LED's and BART's")
    separator = extra.get(DOC_SEP, vocab.get(DOC_SEP))
    if separator is not None and not (len(vocab) - (DOC_SEP in vocab) <= separator < num_rows):
        raise ImportRefused(
            f"{tokenizer_dir}: {DOC_SEP} has id {separator}; expected an id after vocab.json's {len(vocab)} tokens "
            f"and below the model's {num_rows} embedding rows (PRIMERA: 50265 of 50266)"
        )
    named = sum(1 for token_id in vocab.values() if isinstance(token_id, int) and 0 <= token_id < num_rows)
    if separator is None and num_rows > named:
        raise ImportRefused(
            f"{tokenizer_dir}: the model has {num_rows} embedding rows but the tokenizer names only {named} "
            f"(vocab.json) and no {DOC_SEP} was found (added_tokens.json, tokenizer.json, tokenizer_config.json's "
            f"added_tokens_decoder, additional_special_tokens of {' / '.join(SPECIAL_TOKEN_FILES)}); PRIMERA's extra "
            f"row is {DOC_SEP}: add the tokenizer file that declares it (--tokenizer-dir), rather than importing an "
            "unnamed row"
        )
    # bpe_files on vocab.json and merges.txt alone (it gives the <doc-sep> row a
    # filler symbol, which the code below renames to <doc-sep>); the added tokens
    # were checked above.
    with tempfile.TemporaryDirectory() as scratch:
        plain = {token: i for token, i in vocab.items() if token != DOC_SEP}
        write_json_atomic(os.path.join(scratch, "vocab.json"), plain, ensure_ascii=False)
        merges_path = os.path.join(tokenizer_dir, "merges.txt")
        read_merges(merges_path)  # checked where it is, so that a refusal names the user's file
        shutil.copyfile(merges_path, os.path.join(scratch, "merges.txt"))
        files = bpe_files(scratch, num_rows)
    if separator is not None:
        files.symbols[separator - 4] = DOC_SEP
    return files, separator


# ------------------------------------------------------------------ config


def led_windows(config: Dict, path: str, layers: int) -> List[int]:
    window = config.get("attention_window", 512)
    windows = list(window) if isinstance(window, (list, tuple)) else [window] * layers
    if len(windows) != layers or any(isinstance(w, bool) or not isinstance(w, int) or w <= 0 or w % 2 for w in windows):
        raise ImportRefused(
            f"{path}: attention_window {window!r}: expected one positive even window or one per "
            f"encoder layer ({layers})"
        )
    return [int(w) for w in windows]


#: LED's position tables, each its own size (Hugging Face's LED keeps no offset rows).
LED_POSITION_KEYS = {"encoder": "max_encoder_position_embeddings", "decoder": "max_decoder_position_embeddings"}


def led_shape(config: Dict, path: str):
    """``(shape, encoder positions, windows)``: BART's checks on the LED
    configuration (``shape.max_positions``: the decoder's; the position
    tables of :data:`LED_POSITION_KEYS`, without offset rows)."""
    if config.get("model_type") != "led":
        raise ImportRefused(
            f"{path}: model_type is {config.get('model_type')!r}, not 'led'; use mdsfair-import hf-bart for BART"
        )
    if config.get("scale_embedding"):
        raise ImportRefused(f"{path}: scale_embedding=true; Hugging Face's LED does not scale its embeddings")
    shape = bart_shape({**config, "model_type": "bart"}, path, LED_POSITION_KEYS, position_offset=0)
    encoder_positions = shape.sizes.value("encoder_positions")
    return shape, encoder_positions, led_windows(config, path, shape.encoder_layers)


def led_arguments(shape, encoder_positions: int, windows: List[int], separator: Optional[int]):
    """``(arch, flags)`` for fairseq-train / the checkpoint."""
    arch, flags = architecture_flags(shape, family="led")
    if separator is not None:
        arch = "primera"
    window = str(windows[0]) if len(set(windows)) == 1 else ",".join(map(str, windows))
    flags += [
        "--max-encoder-positions",
        str(encoder_positions),
        "--attention-window",
        window,
        "--global-attention",
        "doc-sep" if separator is not None else "first",
    ]
    if separator is not None:
        flags += ["--source-layout", "primera"]
    return arch, flags


def position_arguments(shape, encoder_positions: int) -> List[str]:
    return ["--max-source-positions", str(encoder_positions), "--max-target-positions", str(shape.max_positions)]


# ------------------------------------------------------------------ import


def expected_parameter_names(args, num_rows: int, separator: Optional[int]):
    """The state dict keys and shapes of the ``led`` model ``args`` builds
    (on the meta device: no memory; BART's ``init_bert_params``, which copies
    through the CPU, skipped there)."""
    from unittest import mock

    import torch
    from fairseq.data import Dictionary

    from mdsfair.models.led import LEDModel

    dictionary = Dictionary()
    for index in range(len(dictionary), num_rows):
        dictionary.add_symbol(DOC_SEP if index == separator else f"w{index}")

    class ShapeTask:
        source_dictionary = target_dictionary = dictionary

        def document_separator(self):
            return separator

    with torch.device("meta"), mock.patch("fairseq.models.bart.model.init_bert_params", lambda module: None):
        model = LEDModel.build_model(args, ShapeTask())
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def parameter_mismatch(state: Dict, expected: Dict[str, tuple]) -> Optional[str]:
    """Why ``state`` is not the ``led`` parameters ``expected`` (name ->
    shape, :func:`expected_parameter_names`): the first few names missing,
    not LED's and of another shape, or None when it is."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if not (missing or unexpected or wrong):
        return None
    shapes = ", ".join(f"{k} {tuple(state[k].shape)} != {expected[k]}" for k in wrong[:3])
    return (
        f"missing: {', '.join(missing[:4]) or '-'}; not LED's: {', '.join(unexpected[:4]) or '-'}; "
        f"other shape: {shapes or '-'}"
    )


def import_hf_led(hf_dir: str, out_dir: str, overwrite: bool = False, tokenizer_dir: Optional[str] = None) -> Dict:
    """Convert a Hugging Face LED / PRIMERA model (a folder, or a Hub model id
    ``ORG/NAME[@REVISION]``: :mod:`mdsfair.importers.hf_hub`); returns a summary."""
    import torch

    from mdsfair.importers.output import write_gpt2_import

    model = resolve_model_source(hf_dir)
    tokenizer = resolve_model_source(tokenizer_dir, weights=False) if tokenizer_dir else model
    hf_dir = model.path
    config_path = os.path.join(hf_dir, "config.json")
    config = read_json(config_path, "the model configuration", dict)
    shape, encoder_positions, windows = led_shape(config, config_path)
    state, weights_path = load_hf_weights(hf_dir)
    check_encoder_decoder_weights(shape.sizes, state, weights_path)  # every size of config.json, before writing
    if not shape.tied_output and "lm_head.weight" not in state:
        raise ImportRefused(f"{weights_path}: lm_head.weight is missing and config.json does not tie it")
    try:
        fairseq_state = led_state_dict_from_hf(state)
    except (KeyError, ValueError) as error:
        raise ImportRefused(f"{weights_path}: {error}") from error
    num_rows = fairseq_state["encoder.embed_tokens.weight"].size(0)
    if shape.tied_output:
        shared = fairseq_state["encoder.embed_tokens.weight"]
        for name in ("decoder.embed_tokens.weight", "decoder.output_projection.weight"):
            if not torch.equal(fairseq_state[name], shared):
                raise ImportRefused(
                    f"{weights_path}: {name} (Hugging Face) differs from the shared embedding although "
                    "config.json ties them (tie_word_embeddings=true)"
                )
    files, separator = led_bpe_files(tokenizer.path, num_rows)
    arch, flags = led_arguments(shape, encoder_positions, windows, separator)
    args = checkpoint_namespace(shape, arch, flags, position_arguments(shape, encoder_positions))
    expected = expected_parameter_names(args, num_rows, separator)
    expected.pop("encoder.version", None)
    expected.pop("decoder.version", None)
    mismatch = parameter_mismatch(fairseq_state, expected)
    if mismatch:
        raise ImportRefused(f"{weights_path}: the weights do not match config.json's LED ({mismatch})")
    model_state = OrderedDict((k, fairseq_state[k].contiguous()) for k in expected)
    model_state["encoder.version"] = torch.Tensor([3])
    model_state["decoder.version"] = torch.Tensor([3])
    if shape.tied_output:
        for name in ("decoder.embed_tokens.weight", "decoder.output_projection.weight"):
            model_state[name] = model_state["encoder.embed_tokens.weight"]

    generate, notes = generation_flags(hf_dir)  # checked before anything is written
    source = source_record("hf-led", model, tokenizer, os.path.basename(weights_path))
    write_gpt2_import(out_dir, overwrite, "hf-led", files, source, args, model_state, separator)
    prefix = "led." if any(k.startswith("led.") for k in state) else ""
    shared = state.get(prefix + "shared.weight")
    if (
        not shape.tied_output
        and shared is not None
        and not any(
            torch.equal(shared, state.get(prefix + f"{part}.embed_tokens.weight", shared))
            for part in ("encoder", "decoder")
        )
    ):
        notes.append(
            f"{prefix}shared.weight differs from the encoder and decoder embeddings; with "
            "tie_word_embeddings=false Hugging Face's forward does not read it, so it is not kept "
            "(mdsfair-export hf-led writes the encoder embedding there)"
        )
    train_flags = flags + position_arguments(shape, encoder_positions)
    return {
        "source": weights_path,
        "found": found_where(model, tokenizer),
        "out_dir": out_dir,
        "arch": arch,
        "arch_flags": train_flags,
        "generate_flags": generate,
        # the task is built from fairseq-generate's command line, not the checkpoint; PRIMERA's
        # layout comes from the data-bin (mdsfair-preprocess --source-layout primera)
        "generate_task_flags": ["--max-source-positions", str(encoder_positions)],
        "preprocess_flags": ["--source-layout", "primera"] if separator is not None else [],
        "dictionary_size": num_rows,
        "document_separator": separator,
        "attention_window": windows,
        "notes": notes,
    }


def print_summary(summary: Dict, out=None) -> None:
    separator = summary["document_separator"]
    print_import_summary(summary, f", <doc-sep> = {separator}" if separator is not None else "", out)


def cli_main(argv: Optional[List[str]] = None) -> int:
    return run_import_cli(
        "hf-led",
        "Convert a Hugging Face LED / PRIMERA model directory into an mdsfair led checkpoint (model.pt) and the "
        "GPT-2 BPE files of mdsfair-preprocess (dict.txt, encoder.json, vocab.bpe).",
        "Hugging Face LED directory: config.json, model.safetensors or pytorch_model.bin (or their sharded index), "
        "vocab.json, merges.txt (PRIMERA: added_tokens.json); or a Hugging Face model id ORG/NAME[@REVISION] "
        "(allenai/PRIMERA-multinews), fetched into the Hugging Face cache, or found there when offline "
        "(HF_HUB_OFFLINE=1)",
        "directory (or Hugging Face model id) with the tokenizer files when not in HF_DIR",
        import_hf_led,
        print_summary,
        argv,
    )


# ------------------------------------------------------------------ export


def hf_led_state_from_fairseq(state: Dict):
    """Hugging Face ``LEDForConditionalGeneration`` weights from an ``led``
    state dict (the inverse of :func:`mdsfair.modules.led_parameter_map.led_state_dict_from_hf`);
    returns them and whether the embeddings are tied."""
    import torch

    embedding, decoder_embedding, projection, tied = fairseq_embeddings(state)
    out = OrderedDict()
    out["led.shared.weight"] = embedding
    out["led.encoder.embed_tokens.weight"] = embedding
    out["led.decoder.embed_tokens.weight"] = decoder_embedding
    out["lm_head.weight"] = projection
    for key, tensor in state.items():
        if key in (*EMBEDDING_KEYS, "encoder.version", "decoder.version"):
            continue
        if key.endswith("embed_positions.weight"):
            tensor = tensor[2:]  # fairseq's two unused offset rows
        out["led." + rename_encoder_attention(key, FAIRSEQ_TO_HF_ENCODER_ATTENTION)] = tensor
    out["final_logits_bias"] = torch.zeros(1, embedding.size(0), dtype=embedding.dtype)
    return out, tied


def export_hf_led(checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write a Hugging Face LED directory for an mdsfair ``led`` checkpoint
    (``options``: those of
    :func:`~mdsfair.importers.hf_export.export_hf_directory`); the summary
    also names PRIMERA's ``<doc-sep>`` id (None for LED)."""
    summary = export_hf_directory("hf-led", hf_led_directory, checkpoint, dict_path, out_dir, **options)
    return {**summary, "document_separator": (summary["added_tokens"] or {}).get(DOC_SEP)}


def hf_led_directory(
    checkpoint: str, state: Dict, cfg, dict_path: str, encoder_json: str, vocab_bpe: str
) -> HFDirectory:
    """The Hugging Face LED directory of an ``led`` checkpoint's ``state``
    and model configuration ``cfg`` (loaded, so the led architectures are
    registered)."""
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_MODEL_REGISTRY

    from mdsfair.models.led import LEDModel
    from mdsfair.modules.self_attention_components import parse_attention_window

    arch = cfg_value(cfg, "_name") or cfg_value(cfg, "arch")
    if ARCH_MODEL_REGISTRY.get(arch) is not LEDModel:
        raise ImportRefused(
            f"{checkpoint}: arch {arch!r} is not an led architecture; use mdsfair-export hf-bart for bart_*"
        )
    if (
        cfg_value(cfg, "activation_fn", "gelu") not in HF_ACTIVATIONS
        or cfg_value(cfg, "encoder_normalize_before", False)
        or cfg_value(cfg, "decoder_normalize_before", False)
        or not cfg_value(cfg, "layernorm_embedding", True)
    ):
        raise ImportRefused(
            f"{checkpoint}: not expressible as Hugging Face LED (pre-LayerNorm, no embedding "
            "LayerNorm or an activation Hugging Face lacks)"
        )
    if cfg_value(cfg, "global_attention", "first") == "documents":
        raise ImportRefused(
            f"{checkpoint}: --global-attention documents has no Hugging Face LED equivalent "
            "(its global_attention_mask is set by the caller)"
        )
    hf_state, tied = hf_led_state_from_fairseq(state["model"])
    num_rows, d_model = hf_state["led.shared.weight"].shape
    layers = {
        part: 1 + max(int(k.split(".")[3]) for k in hf_state if k.startswith(f"led.{part}.layers."))
        for part in ("encoder", "decoder")
    }
    windows = parse_attention_window(cfg_value(cfg, "attention_window"), layers["encoder"])

    # vocab.json from dict.txt: <doc-sep> (PRIMERA) goes to added_tokens.json.
    dictionary = Dictionary.load(dict_path)
    separator = dictionary.index(DOC_SEP) if DOC_SEP in dictionary.symbols else None
    with tempfile.TemporaryDirectory() as scratch:
        plain_dict = os.path.join(scratch, "dict.txt")
        with open(dict_path, encoding="utf-8") as source, open(plain_dict, "w", encoding="utf-8") as target:
            for line in source:
                target.write(line.replace(DOC_SEP, "madeupwordDOCSEP", 1) if line.startswith(DOC_SEP + " ") else line)
        vocab = hf_vocabulary(plain_dict, encoder_json, num_rows)
    vocab.pop("madeupwordDOCSEP", None)
    merges = read_merges(vocab_bpe)
    positions = {
        "max_encoder_position_embeddings": hf_state["led.encoder.embed_positions.weight"].size(0),
        "max_decoder_position_embeddings": hf_state["led.decoder.embed_positions.weight"].size(0),
        "attention_window": windows,
    }
    config = hf_config("led", "LEDForConditionalGeneration", cfg, num_rows, d_model, layers, positions, tied)
    special = {"additional_special_tokens": [DOC_SEP]} if separator is not None else {}
    tokenizer = tokenizer_config("LEDTokenizer", config["max_encoder_position_embeddings"], **special)
    if tied:
        for name in ("led.encoder.embed_tokens.weight", "led.decoder.embed_tokens.weight", "lm_head.weight"):
            hf_state.pop(name)
    added = {DOC_SEP: separator} if separator is not None else None
    return HFDirectory(config, vocab, merges, tokenizer, hf_state, added)


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    return run_export_cli(
        "hf-led",
        "Write a Hugging Face LED model directory (config.json, weights, vocab.json, merges.txt, "
        "tokenizer_config.json, PRIMERA's added_tokens.json) for an mdsfair led checkpoint.",
        "fairseq checkpoint of an led architecture (led_*, primera)",
        export_hf_led,
        argv,
    )
