"""fairseq's released ``bart.large`` / ``bart.large.cnn`` checkpoints restore
into every BART-based architecture with the README's ``--restore-file ...
--reset-optimizer --reset-dataloader --reset-meters``.

The tiny checkpoints here have the layout of those releases (fairseq 0.9,
late 2019): a pickled ``argparse.Namespace`` under ``args`` and no ``cfg``;
the argument names of the time (``min_lr``, ``max_sentences``,
``lazy_load``, ``raw_text``, string booleans ``left_pad_source='True'``);
``encoder.version`` / ``decoder.version`` buffers; no
``decoder.output_projection.weight``; ``extra_state`` with ``val_loss`` and
a ``last_optimizer_state``. ``bart.large`` (task ``denoising``) carries one
embedding row more than its ``dict.txt`` has symbols, ``<mask>``;
``bart.large.cnn`` (task ``translation``) does not. The GPT-2 files are those
of a release: ``encoder.json`` maps tokens to GPT-2's own ids and ``dict.txt``
lists them in another (frequency) order."""

import argparse
import json
import os
import random
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.models.bart import BARTModel

from mdsfair.importers.fairseq_bart import training_namespace
from mdsfair.modules.segment_positions import tile_position_table
from tests.import_fixtures import gpt2_data_bin, restore_with_trainer, write_tokenizer
from tests.tolerances import assert_close_in_dtype
from tests.utils import USER_DIR, fairseq_cli

TINY = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "24",
    "--decoder-embed-dim",
    "24",
    "--encoder-ffn-embed-dim",
    "40",
    "--decoder-ffn-embed-dim",
    "40",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
]
TINY_DIMS = {
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_embed_dim": 24,
    "decoder_embed_dim": 24,
    "encoder_ffn_embed_dim": 40,
    "decoder_ffn_embed_dim": 40,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "decoder_input_dim": 24,
    "decoder_output_dim": 24,
}


def release_gpt2_files(directory, madeupwords=0):
    """encoder.json with GPT-2-style ids (not the dictionary's order), vocab.bpe,
    and a dict.txt listing those ids shuffled, with descending counts, then
    ``madeupwords`` padding symbols (``bart.base``'s dict.txt ends in
    ``madeupword0938``: 51,196 lines for a 51,201-row embedding)."""
    vocab = write_tokenizer(os.path.join(directory, "tokenizer"), mask=False)
    tokens = [token for token, index in sorted(vocab.items(), key=lambda item: item[1]) if index >= 4]
    gpt2_ids = {token: 7 + 3 * (len(tokens) - position) for position, token in enumerate(tokens)}
    with open(os.path.join(directory, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(gpt2_ids, f)
    with open(os.path.join(directory, "tokenizer", "merges.txt"), encoding="utf-8") as f:
        merges = f.read()
    with open(os.path.join(directory, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write(merges)
    order = list(gpt2_ids.values())
    random.Random(0).shuffle(order)
    with open(os.path.join(directory, "dict.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{gpt2_id} {1000 - rank}\n" for rank, gpt2_id in enumerate(order)))
        f.write("".join(f"madeupword{index:04d} 0\n" for index in range(madeupwords)))
    return directory


def era_args(task: str) -> argparse.Namespace:
    """Training arguments as fairseq 0.9 pickled them (the names of that time)."""
    common = dict(
        activation_dropout=0.0,
        activation_fn="gelu",
        adam_betas="(0.9, 0.98)",
        adam_eps=1e-06,
        adaptive_input=False,
        adaptive_softmax_cutoff=None,
        adaptive_softmax_dropout=0,
        arch="bart_large",
        attention_dropout=0.1,
        bpe="gpt2",
        bucket_cap_mb=25,
        clip_norm=0.1,
        cpu=False,
        cross_self_attention=False,
        curriculum=0,
        data="/checkpoint/bart/data-bin",
        dataset_impl="mmap",
        ddp_backend="no_c10d",
        decoder_embed_path=None,
        decoder_learned_pos=True,
        decoder_normalize_before=False,
        device_id=0,
        disable_validation=False,
        distributed_backend="nccl",
        distributed_init_method="tcp://learnfair0000:55498",
        distributed_no_spawn=False,
        distributed_port=55498,
        distributed_rank=0,
        distributed_world_size=64,
        dropout=0.1,
        encoder_embed_path=None,
        encoder_learned_pos=True,
        encoder_normalize_before=False,
        end_learning_rate=0.0,
        find_unused_parameters=False,
        fix_batches_to_gpus=False,
        fp16=True,
        fp16_init_scale=128,
        fp16_scale_tolerance=0.0,
        fp16_scale_window=None,
        keep_interval_updates=-1,
        keep_last_epochs=-1,
        layernorm_embedding=True,
        lazy_load=False,
        log_format="json",
        log_interval=100,
        lr_scheduler="polynomial_decay",
        max_epoch=0,
        max_sentences=None,
        max_sentences_valid=None,
        max_source_positions=1024,
        max_target_positions=1024,
        memory_efficient_fp16=True,
        min_loss_scale=0.0001,
        min_lr=-1,
        no_epoch_checkpoints=False,
        no_progress_bar=True,
        no_save=False,
        no_save_optimizer_state=False,
        no_scale_embedding=True,
        no_token_positional_embeddings=False,
        num_workers=1,
        optimizer="adam",
        optimizer_overrides="{}",
        pooler_activation_fn="tanh",
        pooler_dropout=0.0,
        power=1.0,
        raw_text=False,
        relu_dropout=0.0,
        required_batch_size_multiple=8,
        reset_dataloader=False,
        reset_lr_scheduler=False,
        reset_meters=False,
        reset_optimizer=False,
        restore_file="checkpoint_last.pt",
        save_dir="/checkpoint/bart",
        save_interval=1,
        save_interval_updates=0,
        seed=1,
        sentence_avg=False,
        share_all_embeddings=True,
        share_decoder_input_output_embed=True,
        skip_invalid_size_inputs_valid_test=True,
        task=task,
        tensorboard_logdir="",
        threshold_loss_scale=None,
        tokenizer=None,
        train_subset="train",
        update_freq=[1],
        use_bmuf=False,
        user_dir=None,
        valid_subset="valid",
        validate_interval=1,
        weight_decay=0.01,
        **TINY_DIMS,
    )
    if task == "denoising":  # bart.large
        common.update(
            criterion="cross_entropy",
            lr=[0.0004],
            max_tokens=2048,
            max_update=500000,
            total_num_update=500000,
            warmup_updates=10000,
            insert=0.0,
            mask=0.3,
            mask_length="span-poisson",
            mask_random=0.1,
            permute=0.0,
            permute_sentences=1.0,
            poisson_lambda=3.5,
            replace_length=1,
            rotate=0.0,
            sample_break_mode="complete_doc",
            tokens_per_sample=512,
        )
    else:  # bart.large.cnn
        common.update(
            criterion="label_smoothed_cross_entropy",
            label_smoothing=0.1,
            lr=3e-05,
            max_tokens=2048,
            max_update=20000,
            total_num_update=20000,
            warmup_updates=500,
            source_lang="source",
            target_lang="target",
            left_pad_source="True",
            left_pad_target="False",
            truncate_source=True,
            upsample_primary=1,
            load_alignments=False,
            reset_optimizer=True,
            restore_file="/checkpoint/bart.large/model.pt",
        )
    return argparse.Namespace(**common)


def write_release_checkpoint(path, dict_path, task):
    """A tiny bart_large checkpoint in the layout of fairseq's releases."""
    dictionary = Dictionary.load(dict_path)
    if task == "denoising":
        dictionary.add_symbol("<mask>")  # the denoising task appended it: one row more than dict.txt
    args = training_namespace("bart_large", TINY)
    torch.manual_seed(0)
    model = BARTModel.build_model(args, SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary))
    generator = torch.Generator().manual_seed(1)
    state = {}
    for name, value in model.state_dict().items():
        if name == "decoder.output_projection.weight":
            continue  # fairseq 0.9 projected with the tied embedding; no such key
        if name.endswith(".version"):
            state[name] = torch.Tensor([3])
        else:
            state[name] = value + 0.2 * torch.randn(value.shape, generator=generator)
    state["decoder.embed_tokens.weight"] = state["encoder.embed_tokens.weight"]
    checkpoint = {
        "args": era_args(task),
        "model": state,
        "optimizer_history": [
            {
                "criterion_name": "LabelSmoothedCrossEntropyCriterion"
                if task == "translation"
                else "CrossEntropyCriterion",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": 3.62},
                "num_updates": 20000,
            }
        ],
        "extra_state": {"train_iterator": {"epoch": 5, "iterations_in_epoch": 1200}, "val_loss": 3.62, "best": 3.62},
        "last_optimizer_state": {
            "state": {},
            "param_groups": [{"lr": 3e-05, "betas": (0.9, 0.98), "eps": 1e-08, "weight_decay": 0.01, "params": []}],
        },
    }
    torch.save(checkpoint, path)
    return path


# flavour -> (task it was trained with, madeupword symbols padding its dict.txt)
FLAVOURS = {"bart.large": ("denoising", 0), "bart.large.cnn": ("translation", 0), "bart.base": ("denoising", 5)}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """Each release with its own dict.txt, and a data-bin preprocessed with it."""
    root = tmp_path_factory.mktemp("release")
    data_bins, checkpoints = {}, {}
    for flavour, (task, madeupwords) in FLAVOURS.items():
        files = release_gpt2_files(str(root / flavour / "gpt2"), madeupwords)
        data_bins[flavour] = gpt2_data_bin(str(root / flavour / "work"), files)
        checkpoints[flavour] = write_release_checkpoint(
            str(root / f"{flavour}.pt"), os.path.join(files, "dict.txt"), task
        )
    return {"data_bins": data_bins, "checkpoints": checkpoints}


ARCHS = {
    "bart_large": dict(flags=[]),
    "hierencdec_bart_large": dict(flags=["--max-source-positions", "4096", "--per-document-budget"]),
    "pagesum_bart_large": dict(flags=["--locality", "document", "--num-pages", "3", "--max-source-positions", "4096"]),
    "sparse_bart_large": dict(
        flags=["--sparse-training-stage", "kl-only", "--top-r", "0"],
        task="multidoc_summarization_sparse",
        criterion=["--criterion", "sparse_kl"],
    ),
}


def test_release_layout_upgrades_with_fairseq(release):
    """fairseq's own upgrade converts the pickled namespace of that time."""
    raw = torch.load(release["checkpoints"]["bart.large.cnn"], weights_only=False)
    assert "cfg" not in raw and isinstance(raw["args"], argparse.Namespace)
    assert "decoder.output_projection.weight" not in raw["model"]
    state = checkpoint_utils.load_checkpoint_to_cpu(release["checkpoints"]["bart.large.cnn"])
    cfg = state["cfg"]
    assert cfg.model.arch == "bart_large" and cfg.task._name == "translation"
    assert cfg.optimization.stop_min_lr == -1 and list(cfg.optimization.lr) == [3e-05]  # min_lr, float lr
    assert cfg.task.left_pad_source is True
    assert cfg.criterion.label_smoothing == 0.1


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("arch", ARCHS)
def test_restore_file_into_every_bart_architecture(flavour, arch, release, tmp_path):
    options = ARCHS[arch]
    trainer = restore_with_trainer(
        release["data_bins"][flavour],
        release["checkpoints"][flavour],
        arch,
        TINY + options["flags"],
        str(tmp_path),
        task=options.get("task", "multidoc_summarization"),
        criterion=options.get("criterion", ["--criterion", "cross_entropy"]),
    )
    model = trainer.get_model()
    restored = model.state_dict()
    released = torch.load(release["checkpoints"][flavour], weights_only=False)["model"]
    dictionary_size = len(trainer.task.source_dictionary)
    embedding = released["encoder.embed_tokens.weight"]
    # bart.large's <mask> row is dropped because the data-bin's dict.txt has no <mask>.
    assert embedding.size(0) == dictionary_size + (1 if FLAVOURS[flavour][0] == "denoising" else 0)
    assert torch.equal(restored["encoder.embed_tokens.weight"], embedding[:dictionary_size])
    assert torch.equal(restored["decoder.output_projection.weight"], embedding[:dictionary_size])
    for key, value in released.items():
        if key.endswith("embed_tokens.weight") or key.endswith(".version"):
            continue
        if key == "encoder.embed_positions.weight" and arch.startswith("hierencdec"):
            continue
        assert torch.equal(restored[key], value), key
    if arch.startswith("hierencdec"):
        # Sec. 5.3: 1,026 -> 4,098 rows; the pretrained rows are kept, position p
        # (row 2 + p) reads pretrained position p mod 1,024 (tiling, Beltagy et al.).
        table, loaded = restored["encoder.embed_positions.weight"], released["encoder.embed_positions.weight"]
        assert loaded.size(0) == 1026 and table.size(0) == 4098
        assert torch.equal(table[:1026], loaded)
        rows = torch.arange(1026, 4098)
        assert torch.equal(table[rows], loaded[2 + (rows - 2) % 1024])
        assert torch.equal(table, tile_position_table(loaded, 4098, padding_idx=1))
    if arch.startswith("pagesum"):
        assert restored["decoder.page_confidence.weight"].shape == (1, 24)
    if arch.startswith("sparse"):
        layer = "decoder.layers.1.encoder_attn"
        assert torch.equal(
            restored[f"{layer}.sentence_attention.sentence_query_proj.weight"], released[f"{layer}.q_proj.weight"]
        )


@pytest.mark.parametrize("flavour", ["bart.large", "bart.large.cnn"])
def test_generation_loads_a_release_checkpoint_directly(flavour, release, tmp_path):
    """``fairseq-generate --path bart.large.cnn/model.pt`` builds the model from
    the pickled namespace and gets the restored weights."""
    trainer = restore_with_trainer(
        release["data_bins"][flavour], release["checkpoints"][flavour], "bart_large", TINY, str(tmp_path)
    )
    models, _ = checkpoint_utils.load_model_ensemble([release["checkpoints"][flavour]], task=trainer.task)
    loaded, restored = models[0].eval(), trainer.get_model().eval()
    tokens = torch.tensor([[0, 10, 11, 12, 13, 2], [0, 20, 21, 2, 1, 1]])
    previous = torch.tensor([[2, 30, 31, 32], [2, 40, 41, 1]])
    with torch.no_grad():
        expected, _ = restored(tokens, tokens.ne(1).sum(1), previous)
        logits, _ = loaded(tokens, tokens.ne(1).sum(1), previous)
    assert torch.equal(logits, expected)


def test_readme_restore_command_tiles_hierencdec_positions(release, tmp_path):
    """The README's command line, run as a process (one update at lr 0)."""
    save_dir = str(tmp_path / "checkpoints")
    fairseq_cli(
        "fairseq_cli.train",
        [
            release["data_bins"]["bart.large"],
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hierencdec_bart_large",
            *TINY,
            "--restore-file",
            release["checkpoints"]["bart.large"],
            "--reset-optimizer",
            "--reset-dataloader",
            "--reset-meters",
            "--max-source-positions",
            "4096",
            "--max-target-positions",
            "1024",
            "--per-document-budget",
            "--criterion",
            "cross_entropy",
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9,0.999)",
            "--lr",
            "0",
            "--lr-scheduler",
            "fixed",
            "--max-tokens",
            "4096",
            "--max-update",
            "1",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--no-save-optimizer-state",
            "--no-progress-bar",
            "--cpu",
            "--disable-validation",
        ],
    )
    saved = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(save_dir, "checkpoint_last.pt"))["model"]
    released = torch.load(release["checkpoints"]["bart.large"], weights_only=False)["model"]
    table = saved["encoder.embed_positions.weight"]
    assert table.size(0) == 4098
    assert torch.equal(table, tile_position_table(released["encoder.embed_positions.weight"], 4098, padding_idx=1))
    assert torch.equal(saved["decoder.layers.1.fc2.weight"], released["decoder.layers.1.fc2.weight"])


@pytest.mark.parametrize("flavour", ["bart.large", "bart.base"])
def test_export_of_a_release_to_hugging_face(flavour, release, tmp_path):
    """``mdsfair-export hf-bart`` on a release with its own dict.txt and GPT-2
    files: vocab.json gets the dictionary's indices (<mask> on the extra row,
    the madeupword padding kept), Hugging Face's tokenizer writes the data-bin's
    ids, and Hugging Face's logits are the restored fairseq model's."""
    from mdsfair.importers.hf_bart import export_hf_bart
    from tests.import_fixtures import TEXTS, hf_tokenizer, import_transformers

    transformers = import_transformers()
    gpt2 = os.path.join(os.path.dirname(release["checkpoints"][flavour]), flavour, "gpt2")
    out_dir = str(tmp_path / "hf")
    export_hf_bart(release["checkpoints"][flavour], os.path.join(gpt2, "dict.txt"), out_dir)
    trainer = restore_with_trainer(
        release["data_bins"][flavour], release["checkpoints"][flavour], "bart_large", TINY, str(tmp_path)
    )
    dictionary = trainer.task.source_dictionary
    with open(os.path.join(out_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    assert vocab["<mask>"] == len(dictionary) and len(vocab) == len(dictionary) + 1
    assert sum(token.startswith("madeupword") for token in vocab) == FLAVOURS[flavour][1]
    dataset = trainer.task.datasets["valid"]
    tokenizer = hf_tokenizer(out_dir)
    assert dataset[0]["source"].tolist() == tokenizer(TEXTS[0]).input_ids  # one-document cluster
    hf = transformers.BartForConditionalGeneration.from_pretrained(out_dir).eval()
    source = tokenizer([TEXTS[0], TEXTS[3]], padding=True, return_tensors="pt")
    previous = torch.tensor([[2, 30, 31, 32], [2, 40, 41, 1]])
    with torch.no_grad():
        expected = hf(**source, decoder_input_ids=previous).logits[..., : len(dictionary)]
        logits, _ = trainer.get_model().eval()(source.input_ids, source.attention_mask.sum(1), previous)
    real = previous.ne(1)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
