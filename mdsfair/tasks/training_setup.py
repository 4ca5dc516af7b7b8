"""Training set-ups that would fail inside fairseq's trainer, refused first
with what to use instead.

Each task's config inherits :class:`TrainingSetupConfig` (the fairseq values
it reads, by interpolation) and calls :func:`check_training_setup` from its
``build_model`` when the model is not built from a checkpoint: the step
``fairseq-train`` takes before its FSDP wrapping and its trainer, while
generation and hub loads build with ``from_checkpoint=True``, so the training
settings a checkpoint stores never stop a later load.
"""

import importlib.util
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from omegaconf import II


@dataclass
class TrainingSetupConfig(FairseqDataclass):
    """fairseq's values the checks read (interpolated from its config)."""

    bf16: bool = II("common.bf16")
    tpu: bool = II("common.tpu")
    cpu: bool = II("common.cpu")
    fp16: bool = II("common.fp16")
    memory_efficient_fp16: bool = II("common.memory_efficient_fp16")
    ddp_backend: str = II("distributed_training.ddp_backend")
    distributed_world_size: int = II("distributed_training.distributed_world_size")
    # every mdsfair task's own flag (mdsfair/checkpoints/architecture_change.py: check_architecture)
    allow_arch_change: bool = field(
        default=False,
        metadata={
            "help": "resume (--restore-file, or checkpoint_last.pt in --save-dir) although the model's "
            "architecture flags differ from the checkpoint's (e.g. --decoder-attention-heads, "
            "--activation-fn: same tensor shapes, another model); by default such a resume stops "
            "naming each flag with its old and new value. Dropouts and other non-architecture "
            "values may always change (mdsfair/checkpoints/architecture_change.py)"
        },
    )


BF16_NEEDS_TPU = (
    "--bf16 in fairseq means training on a TPU (fairseq's options.py turns it into --tpu) and torch_xla is "
    "not installed, so fairseq would fail inside its TPU code: on a CPU train in float32 (drop --bf16); on a "
    "GPU run mdsfair-train --bf16 (it keeps --bf16 on the GPU) or use --fp16 or --amp (mixed precision with "
    "loss scaling)"
)


def check_bf16_device(cfg) -> None:
    """Refuse ``--bf16`` (which fairseq makes ``--tpu``) without torch_xla,
    before fairseq's trainer asks torch_xla for a device."""
    try:
        bf16, tpu = bool(cfg.bf16), bool(cfg.tpu)
    except Exception:  # noqa: BLE001 (a config built without fairseq's common section)
        return
    if bf16 and tpu and importlib.util.find_spec("torch_xla") is None:
        raise ValueError(BF16_NEEDS_TPU)


FP16_NEEDS_CUDA = (
    "--fp16 without a GPU: fairseq's FP16Optimizer keeps its float32 master weights on a CUDA device, so it "
    "would fail inside fairseq ('Torch not compiled with CUDA enabled'); on a CPU train in float32 (drop "
    "--fp16) or use --memory-efficient-fp16, whose optimizer keeps no separate master copy (docs/precision.md)"
)


def on_cpu(cfg) -> bool:
    """Whether training runs on the CPU: ``--cpu``, or no CUDA device."""
    if bool(cfg.cpu):
        return True
    import torch

    return not torch.cuda.is_available()


def check_fp16_device(cfg) -> None:
    """Refuse ``--fp16`` (not ``--memory-efficient-fp16``) on a CPU, before
    fairseq's ``FP16Optimizer`` asks CUDA for a device."""
    try:
        fp16, memory_efficient = bool(cfg.fp16), bool(cfg.memory_efficient_fp16)
    except Exception:  # noqa: BLE001 (a config built without fairseq's common section)
        return
    if fp16 and not memory_efficient and on_cpu(cfg):
        raise ValueError(FP16_NEEDS_CUDA)


FULLY_SHARDED_REFUSED = (
    "--ddp-backend fully_sharded (fairseq's FSDP through fairscale) is not supported by mdsfair: fairscale's "
    "FSDP path needs CUDA (on CPU it fails: 'Torch not compiled with CUDA enabled', or KeyError 'all_gather' "
    "with compute_device=cpu under gloo), so it cannot be tested here, and it has not been verified on a GPU "
    "with mdsfair's models; use data parallelism (--ddp-backend c10d on GPUs) with "
    "--checkpoint-activations and --update-freq to fit a long source (docs/scaling.md)"
)
CPU_C10D_REFUSED = (
    "--ddp-backend {backend} with --cpu and {world} processes: fairseq passes a CUDA device id to PyTorch's "
    "DistributedDataParallel, which fails on CPU modules; use --ddp-backend legacy_ddp on CPU (mdsfair-train "
    "under torchrun picks it for you), c10d on GPUs"
)


def check_not_fully_sharded(cfg) -> None:
    """Refuse ``--ddp-backend fully_sharded``; called from ``setup_task``,
    because fairseq-train enters fairscale's wrapping context before it
    builds the model (and no checkpoint mdsfair writes stores this backend)."""
    if str(getattr(cfg, "ddp_backend", "")) == "fully_sharded":
        raise ValueError(FULLY_SHARDED_REFUSED)


def check_distributed_backend(cfg) -> None:
    """Refuse the data-parallel backends that fail inside fairseq on this
    set-up, with what to use instead: fairscale's FSDP (CUDA only, not
    verified with mdsfair) and c10d DDP on CPU (fairseq gives it device ids)."""
    try:
        backend, cpu, world = str(cfg.ddp_backend), bool(cfg.cpu), int(cfg.distributed_world_size)
    except Exception:  # noqa: BLE001 (a config built without fairseq's sections, e.g. a hub load)
        return
    if backend == "fully_sharded":
        raise ValueError(FULLY_SHARDED_REFUSED)
    if cpu and world > 1 and backend in ("c10d", "pytorch_ddp"):
        raise ValueError(CPU_C10D_REFUSED.format(backend=backend, world=world))


def check_training_setup(cfg) -> None:
    """Every check of this module on a task config."""
    check_bf16_device(cfg)
    check_fp16_device(cfg)
    check_distributed_backend(cfg)
