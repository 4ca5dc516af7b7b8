"""``mdsfair-train --bf16`` on a GPU: fairseq's own bfloat16 trainer, not its TPU path.

fairseq's ``options.py`` turns ``--bf16`` into ``--tpu``; ``mdsfair-train``
undoes that while it parses a command that trains on a GPU
(:func:`mdsfair.cli.bf16_on_cuda`, :func:`mdsfair.fairseq_patches.bf16_kept_on_cuda`).
What it relies on in fairseq is checked here on CPU kernels: with ``bf16`` and
without ``tpu`` the Trainer casts the model and the batches to bfloat16 and
wraps the optimizer in ``FP16Optimizer`` with float32 master weights and no
loss scaler.
"""

import pytest
import torch

from mdsfair import cli, fairseq_patches
from tests.utils import tiny_transformer

TINY = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(embed_dim=16, ffn_embed_dim=16, attention_heads=2, share_all_embeddings=False),
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "4096",
    "--criterion",
    "label_smoothed_cross_entropy",
]


@pytest.mark.parametrize(
    "argv, cuda, expected",
    [
        (["--bf16"], True, True),
        (["--memory-efficient-bf16"], True, True),
        (["--bf16"], False, False),
        (["--bf16", "--cpu"], True, False),
        (["--bf16", "--tpu"], True, False),
        (["--fp16"], True, False),
    ],
)
def test_bf16_trains_on_cuda_only_with_a_gpu_and_neither_cpu_nor_tpu(argv, cuda, expected):
    assert cli.bf16_on_cuda(["data-bin", *argv], cuda_available=cuda) is expected


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    from tests.utils import make_tiny_data_bin

    return make_tiny_data_bin(str(tmp_path_factory.mktemp("bf16")), train=8, valid=2, test=2)


def parse(tiny_bin, *extra):
    import os

    from fairseq import options

    argv = [tiny_bin, "--user-dir", os.path.dirname(cli.__file__), *TINY, *extra]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def test_fairseq_makes_bf16_a_tpu_run_and_the_context_undoes_it_for_one_command(tiny_bin):
    from fairseq import options

    assert parse(tiny_bin, "--bf16").tpu is True  # fairseq's own behaviour
    original = options.parse_args_and_arch
    with fairseq_patches.bf16_kept_on_cuda():
        kept = parse(tiny_bin, "--bf16")
        assert kept.bf16 is True and kept.tpu is False
        assert parse(tiny_bin).tpu is False and parse(tiny_bin).bf16 is False
    assert options.parse_args_and_arch is original
    assert parse(tiny_bin, "--bf16").tpu is True


def test_fairseq_trainer_trains_in_bf16_without_tpu_and_without_loss_scaler(tiny_bin):
    """The trainer fairseq builds for ``bf16`` and not ``tpu`` (on CPU
    kernels here, the GPU's in a real run): bfloat16 weights, float32
    master copy, no loss scaler, a finite loss that falls."""
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim.fp16_optimizer import FP16Optimizer
    from fairseq.trainer import Trainer

    with fairseq_patches.bf16_kept_on_cuda():
        args = parse(tiny_bin, "--bf16", "--seed", "1")
    args.cpu = True  # CPU kernels stand in for the GPU's
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    assert trainer.device.type == "cpu" and not trainer.tpu
    assert {parameter.dtype for parameter in trainer.model.parameters()} == {torch.bfloat16}
    task.load_dataset("train")
    dataset = task.dataset("train")
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    from fairseq.logging import metrics

    losses = []
    with metrics.aggregate(new_root=True):
        for _ in range(8):
            losses.append(trainer.train_step([sample])["loss"])
    assert isinstance(trainer.optimizer, FP16Optimizer) and trainer.optimizer.scaler is None
    master = trainer.optimizer.fp32_params
    master = list(master.values()) if isinstance(master, dict) else master
    master = [master] if torch.is_tensor(master) else master
    assert master and {tensor.dtype for tensor in master} == {torch.float32}
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
