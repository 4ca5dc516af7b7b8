"""Hugging Face BART's files for mdsfair's BART importer and exporter
(:mod:`mdsfair.importers.hf_bart`): reading JSON and weight files (sharded or
not) and the tokenizer and vocabulary files in both directions (``vocab.json``
/ ``merges.txt`` <-> fairseq ``dict.txt``, ``encoder.json``, ``vocab.bpe``);
the module docstring of :mod:`mdsfair.importers.hf_bart` explains the
vocabulary mapping."""

import json
import os
import pickle
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from mdsfair.data.manifest import write_json_atomic
from mdsfair.importers import ImportRefused

SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq Dictionary indices 0-3
MASK = "<mask>"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_SUFFIX = ".index.json"

# ------------------------------------------------------------------ reading


def read_json(path: str, what: str, kind: type = None):
    """The JSON value of ``path``; with ``kind`` (``dict``, ``list``) a value
    of another JSON type is refused, naming the file."""
    if not os.path.isfile(path):
        raise ImportRefused(f"{path}: missing ({what})")
    with open(path, "rb") as f:
        data = f.read()
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ImportRefused(f"{path}: not UTF-8 text (byte {error.start}); the {what} must be UTF-8 JSON") from None
    except json.JSONDecodeError as error:
        raise ImportRefused(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from error
    if kind is not None and not isinstance(value, kind):
        expected = {dict: "a JSON object", list: "a JSON array"}.get(kind, kind.__name__)
        raise ImportRefused(f"{path}: the {what} must be {expected}, got {type(value).__name__}")
    return value


def shard_file_name(index_path: str, tensor: object, shard: object) -> str:
    """A shard named by the weight map: a plain file name inside the model
    directory (no folder, no ``..``, not absolute), else refused."""
    if not isinstance(tensor, str) or not isinstance(shard, str):
        raise ImportRefused(
            f"{index_path}: the weight map must map tensor names to shard file names, got {tensor!r}: {shard!r}"
        )
    if (
        not shard
        or shard in (".", "..")
        or os.path.isabs(shard)
        or os.path.basename(shard) != shard
        or "/" in shard
        or "\\" in shard
    ):
        raise ImportRefused(
            f"{index_path}: shard {shard!r} (of {tensor!r}) is not a plain file name in the model "
            "directory; an index may only name files beside it"
        )
    return shard


def load_tensor_file(path: str):
    """One ``.safetensors`` or ``torch.save`` state dict file."""
    import torch

    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError as error:
            raise ImportRefused(
                f"{path}: reading .safetensors needs the safetensors package (pip install safetensors)"
            ) from error
        try:
            return load_file(path, device="cpu")
        except Exception as error:  # safetensors' SafetensorError: truncated or not a safetensors file
            raise ImportRefused(f"{path}: not a readable .safetensors file ({error})") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise ImportRefused(
            f"{path}: holds pickled objects besides tensors, which mdsfair does not unpickle (torch.load "
            f"weights_only=True: {first}); convert it to model.safetensors"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ImportRefused(f"{path}: not a readable torch.save file ({error})") from None
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
            index = read_json(index_path, "shard index", dict)
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict):
                raise ImportRefused(f"{index_path}: no 'weight_map' object")
            shards = sorted({shard_file_name(index_path, tensor, shard) for tensor, shard in weight_map.items()})
            state, source = {}, {}
            for shard in shards:
                shard_path = os.path.join(model_dir, shard)
                if not os.path.isfile(shard_path):
                    raise ImportRefused(f"{shard_path}: missing (listed in {index_path})")
                for tensor, value in load_tensor_file(shard_path).items():
                    if tensor in state:
                        raise ImportRefused(
                            f"{index_path}: tensor {tensor!r} is in two shards, {source[tensor]} and "
                            f"{shard}; which one the model holds is not clear"
                        )
                    state[tensor], source[tensor] = value, shard
            return state, index_path
    raise ImportRefused(
        f"{model_dir}: no weights: none of {', '.join(WEIGHT_FILES)} (or their sharded *.index.json) is there"
    )


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
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise ImportRefused(
                    f"{path}:{number}: not UTF-8 text (byte {error.start} of the line); the BPE merges must be UTF-8"
                ) from None
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
    added = dict(read_json(added_path, "added tokens", dict)) if os.path.isfile(added_path) else {}
    tokenizer_path = os.path.join(tokenizer_dir, "tokenizer.json")
    tokenizer = read_json(tokenizer_path, "tokenizer", dict) if os.path.isfile(tokenizer_path) else {}
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
            raise ImportRefused(
                f"{tokenizer_dir}: {token!r} has id {token_id} in the tokenizer but {vocab[token]} in vocab.json"
            )
    check_prefix_space(tokenizer_dir, tokenizer)


def check_prefix_space(tokenizer_dir: str, tokenizer: Optional[Dict] = None, models: str = "BART's") -> None:
    """Refuse a tokenizer that adds a prefix space (``add_prefix_space`` in
    ``tokenizer_config.json``, or on a ``ByteLevel`` pre-tokenizer of
    ``tokenizer.json``, given as ``tokenizer`` where already read): the GPT-2
    encoder of mdsfair-preprocess, like the ``models``' own, adds none."""
    config_path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    prefix_space = os.path.isfile(config_path) and read_json(config_path, "tokenizer config", dict).get(
        "add_prefix_space"
    )
    if tokenizer is None:
        tokenizer_path = os.path.join(tokenizer_dir, "tokenizer.json")
        tokenizer = read_json(tokenizer_path, "tokenizer", dict) if os.path.isfile(tokenizer_path) else {}
    pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
    for node in [pre_tokenizer] + list(pre_tokenizer.get("pretokenizers") or []):
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space"):
            prefix_space = True
    if prefix_space:
        raise ImportRefused(
            f"{tokenizer_dir}: the tokenizer adds a prefix space (add_prefix_space=true); mdsfair-preprocess's GPT-2 "
            f"encoder, like {models}, does not"
        )


def bpe_files(tokenizer_dir: str, num_rows: int) -> BPEFiles:
    """``encoder.json`` / ``vocab.bpe`` / ``dict.txt`` contents for a model with
    ``num_rows`` embedding rows, from ``vocab.json`` and ``merges.txt``."""
    vocab_path = os.path.join(tokenizer_dir, "vocab.json")
    vocab = read_json(vocab_path, "the tokenizer vocabulary", dict)
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


def hf_vocabulary(dict_path: str, encoder_json: str, num_rows: int) -> Dict[str, int]:
    """``vocab.json`` (token -> id = fairseq index) from a GPT-2 ``dict.txt`` and ``encoder.json``."""
    from fairseq.data import Dictionary

    encoder = read_json(encoder_json, "GPT-2 encoder", dict)
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
