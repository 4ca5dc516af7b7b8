"""Multi-GPU readiness harness: data-parallel gradients == one process on the combined batch.

mdsfair trains with fairseq's own distributed trainer, so a model is ready for
many GPUs when fairseq's :class:`~fairseq.trainer.Trainer`, with the model
wrapped by :func:`fairseq.models.distributed_fairseq_model.DistributedFairseqModel`,
produces the same update on ``N`` workers as on one worker that sees all of their
examples. :func:`run_distributed_gradient_check` checks exactly that on CPU:

1. the reference: one process builds task, model and criterion from
   fairseq-train style arguments (seeded as ``fairseq-train`` seeds them), collates
   a fixed set of training examples with the dataset's collater and runs
   ``Trainer.train_step`` on them;
2. the workers: ``world_size`` processes (``torch.multiprocessing.spawn``, gloo
   backend, rendezvous on ``tcp://127.0.0.1:<free port>``) each build the same
   seeded model, which the Trainer wraps with ``DistributedFairseqModel`` for the
   chosen ``--ddp-backend`` (``pytorch_ddp`` and ``legacy_ddp`` both work on
   gloo; for ``pytorch_ddp`` on CPU the harness drops the GPU index fairseq
   passes to torch's DDP, see :class:`CPUDistributedDataParallel`), and run
   ``Trainer.train_step`` on their share of the examples;
3. every parameter's gradient after each step (names, shapes, values) is compared
   with the reference, replicas are compared with each other, and parameters must
   be identical across ranks once wrapped.

Going through ``Trainer.train_step`` means the check covers everything
``fairseq-train`` does in an update: the task's ``train_step`` (for
``multidoc_summarization`` this drops the ``net_input`` keys a stock model's
``forward`` does not accept), the criterion, the all-reduce of gradients by the
wrapper, the all-reduce of ``sample_size`` across workers and
``optimizer.multiply_grads(world_size / sample_size)``, so every replica ends with
``sum of per-example gradients / total sample_size``, the gradient of one process
on the combined batch. Two steps are run by default: under ``pytorch_ddp``
(without ``--find-unused-parameters``) a model with parameters that get no
gradient leaves DDP's reduction unfinished, so the first step's gradients are
not averaged (the comparison fails) and the second step raises "Expected to have
finished reduction in the prior iteration".

Models must be deterministic in train mode for the comparison to be meaningful:
the harness sets every numeric argument whose name contains ``dropout`` or
``layerdrop`` (``--dropout``, ``--attention-dropout``, ``--activation-dropout``,
``--encoder-layerdrop`` ...) and ``--quant-noise-pq`` to 0; a model with other
stochastic parts must expose a flag to switch them off and pass it in
``train_args`` (with ``--dropout 0.1`` left on, the stock transformer's
gradients differ by up to 3e-2). The combined batch is padded to its longest example while each
worker pads only its share, so the check also proves that padding is masked.

Usage from a model's tests::

    from tests.distributed_harness import run_distributed_gradient_check

    def test_my_model_data_parallel(data_bin):  # a module-scoped make_tiny_data_bin
        run_distributed_gradient_check(
            ["--task", "multidoc_summarization", "--arch", "my_tiny_arch",
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
             "--max-source-positions", "128"],
            data_bin,
        )

Each call spawns two fresh Python processes (about 15 CPU-seconds, mostly
importing torch and fairseq); keep sources short so the steps are cheap. To
check many models in one spawn, give :func:`data_parallel_train_steps` one
:class:`WorkerRun` per model with its own ``train_args``/``data_dir`` and a
``name`` (the model-contract suite runs every mdsfair architecture that way),
and compare each with :func:`check_data_parallel_results`.

Training on many GPUs (the commands the check stands for):

* one node, all its GPUs (fairseq spawns one process per GPU; here 8)::

    fairseq-train data-bin --user-dir mdsfair --task multidoc_summarization \\
        --arch ARCH --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \\
        --optimizer adam --lr 3e-4 --max-tokens 4096 \\
        --distributed-world-size 8 --ddp-backend pytorch_ddp

  ``--distributed-world-size`` defaults to the number of visible GPUs;
  ``CUDA_VISIBLE_DEVICES`` selects them. Add ``--find-unused-parameters`` for a
  model whose forward leaves some parameters without gradient, or use
  ``--ddp-backend legacy_ddp``. The effective batch is
  ``world size x --max-tokens x --update-freq``.

* several nodes (here 2 x 8 GPUs) with torchrun, run on every node with its
  ``--node_rank``; fairseq reads ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``
  from the environment torchrun sets::

    torchrun --nnodes 2 --nproc_per_node 8 --node_rank 0 \\
        --master_addr HOST_OF_NODE_0 --master_port 29500 \\
        $(which fairseq-train) data-bin --user-dir mdsfair --task multidoc_summarization \\
        --arch ARCH ... --ddp-backend pytorch_ddp

  (on Slurm, ``srun`` with ``--distributed-port 12345`` instead of torchrun;
  fairseq derives the rendezvous from the Slurm environment).

fairseq's launcher refuses a world size above the GPU count, and ``--cpu`` under
torchrun trains independent copies, which is why the check lives here.
"""

import logging
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MDSFAIR_USER_DIR = os.path.join(REPO_ROOT, "mdsfair")

DDP_BACKENDS = ("pytorch_ddp", "legacy_ddp")
WRAPPER_CLASS_NAMES = {
    "pytorch_ddp": "DistributedDataParallel",
    "c10d": "DistributedDataParallel",
    "legacy_ddp": "LegacyDistributedDataParallel",
    "no_c10d": "LegacyDistributedDataParallel",
}
STOCHASTIC_ARG_MARKERS = ("dropout", "layerdrop")
# set to 0 even when an architecture leaves them to its config's defaults
KNOWN_STOCHASTIC_ARGS = (
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "relu_dropout",
    "pooler_dropout",
    "encoder_layerdrop",
    "decoder_layerdrop",
    "quant_noise_pq",
)
# Used when train_args name none: the check compares gradients, so the
# optimizer only has to exist; plain SGD keeps the second step linear in them.
DEFAULT_OPTIMIZER_ARGS = ["--optimizer", "sgd", "--lr", "0.1"]
WORST_LISTED = 10


# ------------------------------------------------------------ configuration


def _is_stochastic_arg(name: str, value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return name in KNOWN_STOCHASTIC_ARGS or any(marker in name for marker in STOCHASTIC_ARG_MARKERS)


def parse_training_config(train_args: Sequence[str], data_dir: str, seed: int = 1, cpu: bool = True):
    """fairseq-train's configuration for ``data_dir`` + ``train_args`` (CPU
    unless ``cpu`` is False, then fairseq's GPU default; mdsfair as user dir, ``--seed seed`` replacing any seed in ``train_args``),
    with dropout-like randomness off (see the module docstring); SGD when
    ``train_args`` name no optimizer."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"data directory {data_dir!r} does not exist")
    train_args = list(train_args)
    defaults = [] if "--optimizer" in train_args else DEFAULT_OPTIMIZER_ARGS
    argv = [
        data_dir,
        *defaults,
        *train_args,
        "--user-dir",
        MDSFAIR_USER_DIR,
        *(["--cpu"] if cpu else []),
        "--seed",
        str(seed),
    ]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    for name in KNOWN_STOCHASTIC_ARGS:
        setattr(args, name, 0.0)
    for name, value in vars(args).items():
        if _is_stochastic_arg(name, value):
            setattr(args, name, type(value)(0))
    return convert_namespace_to_omegaconf(args)


def _set_data_parallel(cfg, world_size: int, rank: int, ddp_backend: str, init_method: Optional[str]):
    distributed = cfg.distributed_training
    distributed.distributed_world_size = world_size
    distributed.distributed_rank = rank
    distributed.distributed_backend = "gloo"
    distributed.distributed_init_method = init_method
    distributed.ddp_backend = ddp_backend


# --------------------------------------------------------- one train step


def collate_examples(dataset, indices: Sequence[int]) -> Dict:
    """A deterministic batch: the dataset's collater on ``indices``."""
    if len(indices) == 0:
        raise ValueError("a batch needs at least one example")
    if max(indices) >= len(dataset):
        raise ValueError(f"example {max(indices)} requested but the train split has {len(dataset)}")
    return dataset.collater([dataset[i] for i in indices])


def _parameters_of(module, prefix: str = "") -> Dict[str, torch.Tensor]:
    return {prefix + name: param for name, param in module.named_parameters()}


def _gradients_of(parameters: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Current gradients (zeros where a parameter has none: fairseq's legacy
    wrapper fills them in, the reference leaves them unset)."""
    return {
        name: (param.grad.detach().clone() if param.grad is not None else torch.zeros_like(param))
        for name, param in parameters.items()
    }


def train_steps(cfg, example_indices: Sequence, steps: int, model_seed: Optional[int] = None) -> Dict:
    """Build task, model and criterion as fairseq-train does, run ``steps``
    ``Trainer.train_step`` calls on the collated ``example_indices`` and return
    the gradients after each step and the parameters once wrapped.

    ``example_indices`` is one batch (a list of example indices) or a list of
    batches that one update accumulates, as ``--update-freq k`` hands
    ``Trainer.train_step`` ``k`` batches (``cfg.optimization.update_freq`` is
    set to ``[k]``).

    When ``cfg.distributed_training.distributed_world_size > 1`` the process
    group must be initialized; the Trainer then wraps the model with
    ``DistributedFairseqModel`` for ``cfg.distributed_training.ddp_backend``.
    ``model_seed`` (default: ``cfg.common.seed``) seeds the initialization.
    """
    from fairseq import tasks, utils
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer

    from mdsfair.tasks.model_inputs import unwrap_model

    batches = [list(batch) for batch in example_indices] if _is_batch_list(example_indices) else [list(example_indices)]
    cfg.optimization.update_freq = [len(batches)]
    utils.import_user_module(cfg.common)
    seed = cfg.common.seed if model_seed is None else model_seed
    np.random.seed(seed)
    utils.set_torch_seed(seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset("train", combine=False, epoch=1)
    samples = [collate_examples(task.dataset("train"), batch) for batch in batches]

    trainer = Trainer(cfg, task, model, criterion)
    wrapped_model = trainer.model  # the distributed wrapper when world size > 1
    wrapper = getattr(wrapped_model, "module", wrapped_model)
    parameters = _parameters_of(unwrap_model(wrapped_model))
    parameters.update(_parameters_of(unwrap_model(trainer.criterion), prefix="criterion."))
    wrapped_parameters = {name: param.detach().clone() for name, param in parameters.items()}

    gradients = []
    with metrics.aggregate(new_root=True):
        for _ in range(steps):
            if trainer.train_step(samples) is None:
                raise RuntimeError("Trainer.train_step skipped the update (out of memory or overflow)")
            gradients.append(_gradients_of(parameters))
    return {
        "example_ids": sum((sample["id"].tolist() for sample in samples), []),
        "wrapper_classes": [cls.__name__ for cls in type(wrapper).__mro__],
        "wrapped_parameters": wrapped_parameters,
        "gradients": gradients,
        "updated_parameters": {name: param.detach().clone() for name, param in parameters.items()},
    }


def _is_batch_list(example_indices: Sequence) -> bool:
    return len(example_indices) > 0 and not isinstance(example_indices[0], (int, np.integer))


# ------------------------------------------------------------ the workers


class CPUDistributedDataParallel(DistributedDataParallel):
    """torch's DistributedDataParallel as fairseq builds it, minus the GPU index:
    ``DistributedFairseqModel`` always passes ``device_ids=[device_id]``, which
    torch rejects for a CPU module (on a GPU it names the worker's device)."""

    def __init__(self, module, device_ids=None, output_device=None, **kwargs):
        super().__init__(module, **kwargs)


@contextmanager
def cpu_data_parallel_wrapper():
    """Let ``DistributedFairseqModel(--ddp-backend pytorch_ddp)`` wrap a CPU
    model; everything else about the wrapper is fairseq's."""
    from fairseq.models import distributed_fairseq_model

    original = distributed_fairseq_model.DistributedDataParallel
    distributed_fairseq_model.DistributedDataParallel = CPUDistributedDataParallel
    try:
        yield
    finally:
        distributed_fairseq_model.DistributedDataParallel = original


@contextmanager
def single_threaded():
    """One intra-op thread: the workers share the machine's cores, and tiny
    models run fastest, and reproducibly, on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class WorkerRun:
    """One data-parallel run of the workers: the ``--ddp-backend`` and each
    rank's model-initialization seed (``None``: ``--seed`` on every rank, as
    fairseq-train does). ``train_args`` / ``data_dir`` (default: those of the
    call) let one spawn of the workers train several models, e.g. every
    architecture of the model-contract suite; ``name`` then tells the runs
    apart. Several runs share one spawn of the workers."""

    ddp_backend: str
    model_seeds: Optional[Tuple[int, ...]] = None
    train_args: Optional[Tuple[str, ...]] = None
    data_dir: Optional[str] = None
    name: Optional[str] = None

    @property
    def label(self) -> str:
        label = self.ddp_backend if self.name is None else f"{self.name}/{self.ddp_backend}"
        if self.model_seeds is None:
            return label
        return f"{label}/seeds=" + ",".join(map(str, self.model_seeds))


def _data_parallel_worker(
    rank: int,
    world_size: int,
    train_args: List[str],
    data_dir: str,
    seed: int,
    init_method: str,
    shards: List[List[int]],
    runs: List[WorkerRun],
    steps: int,
    out_dir: str,
):
    from fairseq.distributed import utils as distributed_utils

    torch.set_num_threads(1)  # see single_threaded()
    logging.getLogger().setLevel(logging.WARNING)

    def run_config(run: WorkerRun):
        cfg = parse_training_config(run.train_args or train_args, run.data_dir or data_dir, seed)
        _set_data_parallel(cfg, world_size, rank, run.ddp_backend, init_method)
        return cfg

    distributed_utils.distributed_init(run_config(runs[0]))
    try:
        with cpu_data_parallel_wrapper():
            for index, run in enumerate(runs):
                cfg = run_config(run)
                model_seed = seed if run.model_seeds is None else run.model_seeds[rank]
                result = train_steps(cfg, shards[rank], steps, model_seed=model_seed)
                result["ddp_backend"] = run.ddp_backend
                torch.save(result, os.path.join(out_dir, f"run{index}.rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def split_examples(example_indices: Sequence[int], world_size: int) -> List[List[int]]:
    """Contiguous shares of the examples, one per worker (sizes differ by at most one)."""
    if len(example_indices) < world_size:
        raise ValueError(f"{len(example_indices)} examples cannot be shared by {world_size} workers")
    return [list(map(int, share)) for share in np.array_split(np.asarray(example_indices), world_size)]


def data_parallel_train_steps(
    train_args: Sequence[str],
    data_dir: str,
    shards: Sequence[Sequence[int]],
    runs: Sequence[Union[str, WorkerRun]] = DDP_BACKENDS,
    steps: int = 2,
    seed: int = 1,
    timeout_s: float = 600.0,
) -> Dict[str, List[Dict]]:
    """Run :func:`train_steps` in ``len(shards)`` gloo processes, worker ``r`` on
    examples ``shards[r]``, once per run (a ``--ddp-backend`` name or a
    :class:`WorkerRun`); returns ``{run label: [result of rank 0, rank 1, ...]}``,
    each result also naming its ``ddp_backend``. A failing worker's error is
    raised here; workers still running after ``timeout_s`` are terminated."""
    world_size = len(shards)
    if world_size < 2:
        raise ValueError("data parallelism needs at least two workers")
    runs = [WorkerRun(run) if isinstance(run, str) else run for run in runs]
    for run in runs:
        if run.ddp_backend not in WRAPPER_CLASS_NAMES:
            raise ValueError(
                f"unsupported --ddp-backend {run.ddp_backend!r}; choose from {sorted(WRAPPER_CLASS_NAMES)}"
            )
        if run.model_seeds is not None and len(run.model_seeds) != world_size:
            raise ValueError(f"{run.label}: {len(run.model_seeds)} model seeds for {world_size} workers")
    if len({run.label for run in runs}) != len(runs):
        raise ValueError(f"runs repeat: {[run.label for run in runs]}")
    with tempfile.TemporaryDirectory(prefix="mdsfair-ddp-") as out_dir:
        workers = mp.start_processes(
            _data_parallel_worker,
            args=(
                world_size,
                list(train_args),
                data_dir,
                seed,
                f"tcp://127.0.0.1:{_free_loopback_port()}",
                [list(s) for s in shards],
                runs,
                steps,
                out_dir,
            ),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout_s
        while not workers.join(timeout=1):  # raises with the traceback of a failed worker
            if time.monotonic() > deadline:
                for process in workers.processes:
                    if process.is_alive():
                        process.terminate()
                raise TimeoutError(
                    f"the workers did not finish in {timeout_s} s: a rank waiting in a collective "
                    "that another rank never reaches?"
                )
        return {
            run.label: [
                torch.load(os.path.join(out_dir, f"run{index}.rank{rank}.pt"), weights_only=False)
                for rank in range(world_size)
            ]
            for index, run in enumerate(runs)
        }


# -------------------------------------------------------------- comparison


def compare_tensors(
    expected: Dict[str, torch.Tensor], actual: Dict[str, torch.Tensor], atol: float, rtol: float, what: str
) -> Dict[str, float]:
    """Max absolute difference per name; AssertionError listing the worst
    names when names, shapes or values (``allclose(atol, rtol)``) differ."""
    if set(expected) != set(actual):
        raise AssertionError(
            f"{what}: parameter names differ; only expected: {sorted(set(expected) - set(actual))}, "
            f"only actual: {sorted(set(actual) - set(expected))}"
        )
    differences, mismatched = {}, []
    for name, reference in expected.items():
        value = actual[name]
        if value.shape != reference.shape:
            raise AssertionError(f"{what}: {name} has shape {tuple(value.shape)}, expected {tuple(reference.shape)}")
        difference = (value.double() - reference.double()).abs()
        differences[name] = difference.max().item() if difference.numel() else 0.0
        if not torch.allclose(value, reference, atol=atol, rtol=rtol):
            mismatched.append(name)
    if mismatched:
        worst = sorted(mismatched, key=lambda n: -differences[n])[:WORST_LISTED]
        listing = "\n".join(
            f"  {name}: max |diff| {differences[name]:.3e} (max |expected| {expected[name].abs().max().item():.3e})"
            for name in worst
        )
        raise AssertionError(
            f"{what}: {len(mismatched)} of {len(expected)} tensors differ beyond atol={atol}, rtol={rtol}; "
            f"worst:\n{listing}"
        )
    return differences


def check_data_parallel_results(reference: Dict, results: Dict[str, List[Dict]], atol: float, rtol: float):
    """Compare worker results with the single-process reference; returns
    ``{run label: {parameter: max |gradient difference| over steps}}``."""
    if not any(gradient.any() for gradient in reference["gradients"][0].values()):
        raise AssertionError("the reference gradients are all zero: the comparison would prove nothing")
    report = {}
    for label, ranks in results.items():
        for rank, result in enumerate(ranks):
            if len(result["gradients"]) != len(reference["gradients"]):
                raise ValueError(
                    f"{label}: rank {rank} ran {len(result['gradients'])} steps, "
                    f"the reference {len(reference['gradients'])}"
                )
            expected_wrapper = WRAPPER_CLASS_NAMES[result["ddp_backend"]]
            if expected_wrapper not in result["wrapper_classes"]:
                raise AssertionError(
                    f"{label}: rank {rank} trained under {result['wrapper_classes'][0]}, "
                    f"not fairseq's {expected_wrapper} wrapper"
                )
        shares = [result["example_ids"] for result in ranks]
        if sorted(sum(shares, [])) != sorted(reference["example_ids"]) or not all(shares):
            raise AssertionError(
                f"{label}: the ranks' examples {shares} do not split the reference batch "
                f"{reference['example_ids']}: the check would not test data parallelism"
            )
        for rank, result in enumerate(ranks[1:], start=1):
            compare_tensors(
                ranks[0]["wrapped_parameters"],
                result["wrapped_parameters"],
                0.0,
                0.0,
                f"{label}: parameters after wrapping, rank {rank} vs rank 0",
            )
        differences = {}
        for step, reference_gradients in enumerate(reference["gradients"]):
            for rank, result in enumerate(ranks):
                step_differences = compare_tensors(
                    reference_gradients,
                    result["gradients"][step],
                    atol,
                    rtol,
                    f"{label}: gradients of step {step + 1}, rank {rank} of {len(ranks)} vs one process",
                )
                for name, difference in step_differences.items():
                    differences[name] = max(difference, differences.get(name, 0.0))
        for rank, result in enumerate(ranks[1:], start=1):
            compare_tensors(
                ranks[0]["updated_parameters"],
                result["updated_parameters"],
                0.0,
                0.0,
                f"{label}: parameters after {len(reference['gradients'])} updates, rank {rank} vs rank 0",
            )
        report[label] = differences
    return report


def run_distributed_gradient_check(
    train_args: List[str],
    data_dir: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    batch_examples: int = 4,
    seed: int = 1,
    ddp_backends: Sequence[str] = DDP_BACKENDS,
    world_size: int = 2,
    steps: int = 2,
) -> Dict[str, Dict[str, float]]:
    """Check that fairseq's distributed training of the model given by
    ``train_args`` (fairseq-train options, e.g. ``["--task",
    "multidoc_summarization", "--arch", "transformer", ...]``; ``data_dir`` is the
    data-bin) computes the gradients of one process on the combined batch.

    Examples ``0 .. batch_examples-1`` of the train split form the batch; worker
    ``r`` of ``world_size`` gets the ``r``-th contiguous share (checked: if
    every worker saw the whole batch the gradients would agree too). Each backend in
    ``ddp_backends`` runs ``steps`` updates. Raises AssertionError (worst
    parameters listed) when a gradient, after any step and on any rank, is not
    ``allclose(atol, rtol)`` to the reference, when the ranks' parameters differ
    after wrapping or after the updates, or when the Trainer did not use the
    expected wrapper. Returns ``{ddp_backend: {parameter: max |gradient
    difference|}}``.
    """
    cfg = parse_training_config(train_args, data_dir, seed)
    _set_data_parallel(cfg, 1, 0, cfg.distributed_training.ddp_backend, None)
    example_indices = list(range(batch_examples))
    shards = split_examples(example_indices, world_size)
    with single_threaded():
        reference = train_steps(cfg, example_indices, steps)
    results = data_parallel_train_steps(train_args, data_dir, shards, ddp_backends, steps, seed)
    return check_data_parallel_results(reference, results, atol, rtol)
