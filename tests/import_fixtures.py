"""Shared fixtures of the import tests: Hugging Face ``transformers`` (a test
extra), tiny BART and LED models and byte-level BPE tokenizers written by the
tests, tiny data-bins over them, and fairseq-train's restore path run in
process."""

import json
import os
from typing import Dict, List, Optional, Sequence

import torch

# Documents for the tokenizer and the data-bins: words, digits, punctuation,
# contractions and non-ASCII characters, so byte-level BPE meets all of them.
TEXTS = [
    "The council approved the new budget on Tuesday. Critics said it cuts too much from schools.",
    "Officials didn't expect the vote to pass; it passed 7-2 after a long debate.",
    "Café owners in Zürich report higher prices — rents rose 12% in 2023.",
    "A storm hit the coast overnight. Thousands of homes lost power, and roads were closed.",
    "Researchers say the model summarizes many documents at once. It reads them all before writing.",
    "Prices for coffee, tea and cocoa climbed again this week, traders said.",
    "The team's coach resigned after three straight losses; she'll be replaced next month.",
    "Emergency crews worked through the night to restore power to 40,000 customers.",
]


def import_transformers():
    """``transformers`` (a test extra) with its logging quieted. A plain
    import: install.sh installs no torchaudio (fairseq's wheel gets it as an
    optional extra), so nothing is hidden here (tests/test_install.py checks it)."""
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def write_tokenizer(directory: str, vocab_size: int = 320, mask: bool = True) -> Dict[str, int]:
    """Train a byte-level BPE tokenizer on :data:`TEXTS` and write BART's
    ``vocab.json`` (``<s> <pad> </s> <unk>`` = 0-3, ``<mask>`` last) and
    ``merges.txt`` into ``directory``; returns the vocabulary."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(
        TEXTS * 4,
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        show_progress=False,
    )
    os.makedirs(directory, exist_ok=True)
    tokenizer.save_model(directory)
    with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    if mask:
        vocab["<mask>"] = len(vocab)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    return vocab


TINY_BART = dict(
    d_model=24,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=40,
    decoder_ffn_dim=40,
    max_position_embeddings=96,
)


def tiny_hf_bart(
    directory: str,
    scale_embedding: bool = False,
    tied: bool = True,
    weights_format: str = "safetensors",
    extra_rows: int = 0,
    seed: int = 0,
    mask: bool = True,
    eos_pull: float = 0.0,
    **config_overrides,
):
    """A random ``BartForConditionalGeneration`` with its tokenizer, saved in
    ``directory`` as a Hugging Face model directory. Every parameter
    (layer norms and position tables included) gets seeded noise, so no
    weight is left at an initialization a conversion bug could hide behind.
    ``weights_format`` ``bin`` writes ``pytorch_model.bin`` with every tied
    name present (as transformers 4 did), ``safetensors`` one copy of each.
    ``eos_pull`` moves the last decoder LayerNorm's bias towards the output
    row of ``</s>``, so that beam hypotheses end by themselves after a few
    tokens instead of running into the length limit. ``extra_rows`` gives the
    embedding that many rows more (negative: fewer) than ``vocab.json`` has tokens."""
    transformers = import_transformers()
    vocab = write_tokenizer(directory, mask=mask)
    config = transformers.BartConfig(
        vocab_size=len(vocab) + extra_rows,
        scale_embedding=scale_embedding,
        tie_word_embeddings=tied,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=0.3,
        **{**TINY_BART, **config_overrides},
    )
    torch.manual_seed(seed)
    model = transformers.BartForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
        if eos_pull:
            eos_row = model.get_output_embeddings().weight[config.eos_token_id]
            model.model.decoder.layers[-1].final_layer_norm.bias.add_(eos_pull * eos_row / eos_row.norm())
    config.save_pretrained(directory)
    save_hf_weights(model, directory, weights_format)
    return model, vocab


def save_hf_weights(model, directory: str, weights_format: str) -> None:
    """``model.safetensors`` (one copy of tied tensors, as save_pretrained),
    ``pytorch_model.bin`` (every name, as transformers 4 wrote it) or, for
    ``sharded``, two safetensors shards with ``model.safetensors.index.json``."""
    state = model.state_dict()
    if weights_format == "bin":
        torch.save({k: v.clone() for k, v in state.items()}, os.path.join(directory, "pytorch_model.bin"))
        return
    from safetensors.torch import save_file

    seen, tensors = set(), {}
    for name, tensor in state.items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.contiguous()
    if weights_format == "safetensors":
        save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
        return
    assert weights_format == "sharded", weights_format
    names = sorted(tensors)
    weight_map = {}
    for shard, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        file = f"model-{shard + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(directory, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


#: The tiny LED's attention windows, one per encoder layer (both shorter than
#: the test sources), and its encoder and decoder position tables.
TINY_LED_WINDOWS = [4, 8]
TINY_LED_ENCODER_POSITIONS, TINY_LED_DECODER_POSITIONS = 160, 64


def tiny_hf_led(directory, transformers, layout="safetensors", primera=False, seed=0, tied=True):
    """A random LED with a byte-level BPE tokenizer, saved in ``directory``
    (``layout``: see :func:`save_hf_weights`); ``primera`` adds
    ``<doc-sep>`` as PRIMERA's files do (added_tokens.json, tokenizer files)
    and gives the embedding that row; ``tied=False``: encoder, decoder and
    output embeddings are separate tensors (tie_word_embeddings=false)."""
    vocab = write_tokenizer(directory)
    rows = len(vocab) + int(primera)
    config = transformers.LEDConfig(
        vocab_size=rows,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_encoder_position_embeddings=TINY_LED_ENCODER_POSITIONS,
        max_decoder_position_embeddings=TINY_LED_DECODER_POSITIONS,
        attention_window=list(TINY_LED_WINDOWS),
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    model = transformers.LEDForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
            else:
                parameter.normal_(0, 0.3)
    config.save_pretrained(directory)
    save_hf_weights(model, directory, layout)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    if primera:
        tokenizer.add_special_tokens({"additional_special_tokens": ["<doc-sep>"]})
        tokenizer.save_pretrained(directory)
        with open(os.path.join(directory, "added_tokens.json"), "w") as f:
            json.dump({"<doc-sep>": len(vocab)}, f)  # PRIMERA's file: {"<doc-sep>": 50265}
    return model, vocab


def hf_tokenizer(directory: str):
    transformers = import_transformers()
    return transformers.AutoTokenizer.from_pretrained(directory)


def write_raw_splits(directory: str, clusters: Sequence[Dict], splits: Sequence[str] = ("train", "valid")) -> str:
    os.makedirs(directory, exist_ok=True)
    for split in splits:
        with open(os.path.join(directory, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for cluster in clusters:
                f.write(json.dumps(cluster, ensure_ascii=False) + "\n")
    return directory


def default_clusters() -> List[Dict]:
    """One-document and several-document clusters over :data:`TEXTS`."""
    return [
        {"id": "one", "documents": [TEXTS[0]], "summary": TEXTS[1]},
        {"id": "two", "documents": [TEXTS[2], TEXTS[3]], "summary": TEXTS[4]},
        {"id": "three", "documents": [TEXTS[5], TEXTS[6], TEXTS[7]], "summary": TEXTS[0]},
        {"id": "four", "documents": [TEXTS[4]], "summary": TEXTS[2]},
    ]


def gpt2_data_bin(work_dir: str, bpe_dir: str, clusters: Optional[Sequence[Dict]] = None) -> str:
    """``mdsfair-preprocess --subword gpt2`` with the files an import wrote."""
    from mdsfair.preprocess.binarize import run

    raw = write_raw_splits(os.path.join(work_dir, "raw"), clusters or default_clusters())
    dest = os.path.join(work_dir, "data-bin")
    run(
        [
            "--input-dir",
            raw,
            "--destdir",
            dest,
            "--subword",
            "gpt2",
            "--gpt2-encoder-json",
            os.path.join(bpe_dir, "encoder.json"),
            "--gpt2-vocab-bpe",
            os.path.join(bpe_dir, "vocab.bpe"),
            "--dict",
            os.path.join(bpe_dir, "dict.txt"),
            "--no-progress-bar",
        ]
    )
    return dest


def restore_with_trainer(
    data_bin: str,
    restore_file: str,
    arch: str,
    flags: Sequence[str] = (),
    save_dir: str = ".",
    task: str = "multidoc_summarization",
    criterion: Sequence[str] = ("--criterion", "cross_entropy"),
):
    """What ``fairseq-train DATA --user-dir mdsfair --task TASK --arch ARCH
    FLAGS --restore-file FILE --reset-optimizer --reset-dataloader
    --reset-meters`` does before its first update, in this process: parse,
    build task, model, criterion and trainer, then fairseq's own
    ``checkpoint_utils.load_checkpoint``. Returns the trainer."""
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            data_bin,
            "--task",
            task,
            "--arch",
            arch,
            *flags,
            *criterion,
            "--restore-file",
            restore_file,
            "--reset-optimizer",
            "--reset-dataloader",
            "--reset-meters",
            "--optimizer",
            "adam",
            "--lr",
            "1e-4",
            "--max-tokens",
            "2048",
            "--cpu",
            "--save-dir",
            save_dir,
            "--no-progress-bar",
            "--seed",
            "1",
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    fairseq_task = tasks.setup_task(cfg.task)
    fairseq_task.load_dataset("valid", combine=False, epoch=1)
    model = fairseq_task.build_model(cfg.model)
    trainer = Trainer(cfg, fairseq_task, model, fairseq_task.build_criterion(cfg.criterion))
    checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    return trainer
