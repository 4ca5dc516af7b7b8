"""The model contract: what every registered mdsfair architecture must do.

In the spirit of Hugging Face's ``ModelTesterMixin``: ``tests/test_model_contract.py``
runs one parametrized suite over every architecture whose model class lives
in ``mdsfair.*`` (:func:`mdsfair_architectures`, read from fairseq's
``ARCH_MODEL_REGISTRY``), so an architecture registered later is checked
without a line of test code. This module holds what the suite needs:

* every architecture runs at tiny dimensions: those of its model's
  ``<model>_tiny`` architecture (:func:`tiny_configuration`; a model without
  one fails the suite), given as command-line flags on top of the
  architecture's own settings, so ``hiertransformer_hiersumm`` keeps its
  pre-LN layers, shared inter-paragraph attention ... at d 32;
* the model *family* says how the contract drives it (:class:`ModelFamily`):
  summarizers train on ``multidoc_summarization`` with label-smoothed
  cross-entropy and generate; the paragraph ranker trains on
  ``paragraph_ranking`` and LoBART's content selector on
  ``content_selection``, and neither generates;
* :class:`ContractModel` builds the configuration, task, model and criterion
  of one architecture the way ``fairseq-train`` does (through
  ``tests/distributed_harness.parse_training_config``: fixed seed, every
  dropout-like probability 0 so train-mode passes are deterministic) on
  :func:`test_device` (CPU, or the GPU with ``pytest --device cuda``): models
  and batches are moved there, and fairseq's Trainer runs there;
* numerical helpers: the loss and gradients of one batch, the full
  (teacher-forced) log-probabilities of a hypothesis.

To add a model: register it and a ``<model>_tiny`` architecture; a model
that is neither a summarizer on ``multidoc_summarization`` nor the ranker
adds its family to :data:`FAMILIES`.
"""

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from tests.distributed_harness import parse_training_config

#: Arguments of a tiny architecture that set a size (the tiny configuration
#: of every other architecture of the same model).
DIMENSION_ARGUMENT = re.compile(r"(_embed_dim|_hidden_dim|_head_dim|_layers|_heads)$")


@dataclass(frozen=True)
class ModelFamily:
    """How the contract trains and runs the models of one family.

    ``task_args``: fairseq-train task and criterion flags; ``data``: which
    folder of the contract's work directory the task reads (``data-bin``,
    the binarized clusters, or ``raw``, the JSONL clusters); ``generates``:
    whether the models are sequence-to-sequence (incremental decoding, beam
    search, the hub).
    """

    name: str
    task_args: Tuple[str, ...]
    data: str
    generates: bool


SUMMARIZER = ModelFamily(
    "summarizer",
    (
        "--task",
        "multidoc_summarization",
        "--max-source-positions",
        "512",
        "--max-target-positions",
        "256",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
    ),
    "data-bin",
    True,
)
#: sparse_bart trains its sentence-saliency approximator with the KL loss of
#: its own task (plain cross-entropy leaves the approximator without gradient).
SPARSE_SUMMARIZER = ModelFamily(
    "sparse summarizer",
    (
        "--task",
        "multidoc_summarization_sparse",
        "--max-source-positions",
        "512",
        "--max-target-positions",
        "256",
        "--criterion",
        "sparse_kl",
        "--top-r",
        "3",
    ),
    "data-bin",
    True,
)
RANKER = ModelFamily("ranker", ("--task", "paragraph_ranking", "--criterion", "paragraph_ranking"), "raw", False)
#: LoBART's content selector trains on the raw clusters with its two-task
#: loss; it decodes only inside mdsfair-rank, not through the task's generator.
CONTENT_SELECTOR = ModelFamily(
    "content selector", ("--task", "content_selection", "--criterion", "content_selection"), "raw", False
)

#: Model name (``@register_model``) -> family; every other mdsfair model is a summarizer.
FAMILIES: Dict[str, ModelFamily] = {
    "paragraph_ranker": RANKER,
    "sparse_bart": SPARSE_SUMMARIZER,
    "lobart_mcs": CONTENT_SELECTOR,
}

#: fairseq-preprocess side data every summarizer may need (DAPE's dependency arcs).
SIDE_DATA = ("dep_head", "dep_rel")
#: Small synthetic clusters: 2 documents, no distractor or filler, 2-3 facts.
SYNTHETIC_OPTIONS = {"num_docs": 2, "distractor_docs": 0, "noise_sentences": 0, "min_facts": 2, "max_facts": 3}


def _registered():
    import mdsfair

    mdsfair.register()


def mdsfair_architectures() -> List[str]:
    """Every registered architecture whose model class is mdsfair's."""
    _registered()
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(arch for arch, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("mdsfair."))


def model_name(arch: str) -> str:
    _registered()
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return ARCH_MODEL_NAME_REGISTRY[arch]


def family(arch: str) -> ModelFamily:
    return FAMILIES.get(model_name(arch), SUMMARIZER)


def tiny_architecture(arch: str) -> Optional[str]:
    """The ``<model>_tiny`` architecture of ``arch``'s model, or None."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    name = f"{model_name(arch)}_tiny"
    return name if ARCH_MODEL_NAME_REGISTRY.get(name) == model_name(arch) else None


def tiny_configuration(arch: str) -> Dict[str, int]:
    """The sizes (``*_embed_dim``, ``*_hidden_dim``, ``*_layers``, ``*_heads``)
    that the model's tiny architecture sets, to run ``arch`` at; raises
    LookupError when the model has no tiny architecture."""
    from argparse import Namespace

    from fairseq.models import ARCH_CONFIG_REGISTRY

    tiny = tiny_architecture(arch)
    if tiny is None:
        raise LookupError(
            f"architecture {arch!r} (model {model_name(arch)!r}) has no tiny configuration: register an "
            f"architecture {model_name(arch)}_tiny (see mdsfair/models/tiny_dimensions.py) so the model-contract "
            "suite can run it in seconds"
        )
    args = Namespace()
    ARCH_CONFIG_REGISTRY[tiny](args)
    return {
        name: value
        for name, value in sorted(vars(args).items())
        if DIMENSION_ARGUMENT.search(name) and isinstance(value, int) and not isinstance(value, bool)
    }


def tiny_flags(arch: str) -> List[str]:
    flags = []
    for name, value in tiny_configuration(arch).items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


def train_args(arch: str, *extra: str, model_family: Optional[ModelFamily] = None) -> List[str]:
    """fairseq-train flags of ``arch`` at tiny dimensions on its family's task
    (``model_family``'s when given: a model whose flags choose how it trains)."""
    return [*(model_family or family(arch)).task_args, "--arch", arch, *tiny_flags(arch), *extra]


def make_contract_data(work_dir: str) -> Dict[str, str]:
    """Small synthetic clusters (``raw``) and their data-bin with the side
    data of :data:`SIDE_DATA` and ``<doc-sep>`` in its dictionary
    (``data-bin``): the data of every family.

    With ``MDSFAIR_TEST_CONTRACT_DATA=DIR`` (a directory this function wrote,
    ``python -m tests.model_contract DIR``) a copy of it instead: for a
    machine without spaCy, which parses the side data (a GPU machine)."""
    import shutil

    from tests.utils import make_tiny_data_bin

    prebuilt = os.environ.get("MDSFAIR_TEST_CONTRACT_DATA")
    if prebuilt:
        for name in ("data-bin", "raw"):
            if not os.path.isdir(os.path.join(prebuilt, name)):
                raise FileNotFoundError(
                    f"MDSFAIR_TEST_CONTRACT_DATA={prebuilt} has no {name}/: write it with "
                    "python -m tests.model_contract DIR"
                )
            shutil.copytree(os.path.join(prebuilt, name), os.path.join(work_dir, name))
        return {"data-bin": os.path.join(work_dir, "data-bin"), "raw": os.path.join(work_dir, "raw")}

    data_bin = make_tiny_data_bin(
        work_dir,
        train=8,
        valid=4,
        test=4,
        vocab_size=300,
        extra_args=["--side-data", *SIDE_DATA],
        **SYNTHETIC_OPTIONS,
    )
    # PRIMERA's document separator, as an imported PRIMERA dict.txt has it: the
    # primera architecture sets the task's --source-layout primera.
    with open(os.path.join(data_bin, "dict.txt"), "a", encoding="utf-8") as dictionary:
        dictionary.write("<doc-sep> 0 #fairseq:overwrite\n")
    return {"data-bin": data_bin, "raw": os.path.join(work_dir, "raw")}


def test_device() -> torch.device:
    """The device of the contract's models: ``pytest --device cuda`` (or
    ``MDSFAIR_TEST_DEVICE=cuda``, tests/conftest.py), else the CPU."""
    return torch.device(os.environ.get("MDSFAIR_TEST_DEVICE", "cpu"))


def to_test_device(sample):
    """``sample`` (a collated batch) with every tensor on :func:`test_device`."""
    from fairseq import utils

    device = test_device()
    return utils.apply_to_sample(lambda tensor: tensor.to(device), sample)


class ContractModel:
    """Configuration, task, model and criterion of one architecture, built
    as fairseq-train builds them (seeded; dropout-like randomness off), on
    the task of ``arch``'s family or of ``model_family``."""

    def __init__(
        self, arch: str, data: Dict[str, str], *extra: str, seed: int = 1, model_family: Optional[ModelFamily] = None
    ):
        from fairseq import tasks, utils

        self.arch = arch
        self.family = model_family or family(arch)
        self.data_dir = data[self.family.data]
        self.args = train_args(arch, *extra, model_family=self.family)
        self.cfg = parse_training_config(self.args, self.data_dir, seed, cpu=test_device().type == "cpu")
        utils.import_user_module(self.cfg.common)
        self.task = tasks.setup_task(self.cfg.task)
        self.seed = seed

    def build_model(self):
        from fairseq import utils

        utils.set_torch_seed(self.seed)
        return self.task.build_model(self.cfg.model).to(test_device())

    def build_criterion(self):
        return self.task.build_criterion(self.cfg.criterion)

    def dataset(self, split: str):
        if split not in self.task.datasets:
            self.task.load_dataset(split, combine=False, epoch=1)
        return self.task.dataset(split)

    def batch(self, split: str, indices: Sequence[int], model=None) -> Dict:
        """The collated examples ``indices`` of ``split``, restricted to the
        inputs ``model`` accepts (as the task's train step does)."""
        dataset = self.dataset(split)
        sample = dataset.collater([dataset[int(i)] for i in indices])
        if model is not None and hasattr(self.task, "_sample_for"):
            sample = self.task._sample_for(model, sample)
        return to_test_device(sample)

    def shortest(self, split: str, count: int) -> List[int]:
        """Indices of the ``count`` examples with the shortest sources."""
        sizes = self.dataset(split).sizes
        sizes = sizes[:, 0] if sizes.ndim > 1 else sizes
        return [int(i) for i in np.argsort(sizes, kind="stable")[:count]]


def loss_and_gradients(model, criterion, sample) -> Tuple[torch.Tensor, int, Dict[str, torch.Tensor]]:
    """One forward and backward pass of the criterion (summed over the
    batch, as fairseq's criteria reduce); returns the loss, the sample size
    and every parameter's gradient (zeros where none)."""
    model.zero_grad(set_to_none=True)
    loss, sample_size, _ = criterion(model, sample)
    loss.backward()
    gradients = {
        name: (
            param.grad.detach().float().clone()
            if param.grad is not None
            else torch.zeros_like(param, dtype=torch.float)
        )
        for name, param in model.named_parameters()
    }
    return loss.detach().float(), int(sample_size), gradients


def flat_gradient(gradients: Dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([gradients[name].reshape(-1) for name in sorted(gradients)])


def unpadded_example(sample: Dict, index: int, pad: int) -> Dict:
    """The net input of example ``index`` of ``sample`` alone, its source
    padding removed (every ``[B, T]`` source tensor cut to its length)."""
    net_input = sample["net_input"]
    length = int(net_input["src_tokens"][index].ne(pad).sum())
    single = {}
    for name, value in net_input.items():
        if not torch.is_tensor(value):
            single[name] = value
            continue
        row = value[index : index + 1]
        if name.startswith("src_") and value.dim() == 2 and value.shape == net_input["src_tokens"].shape:
            row = row[:, :length]
        single[name] = row
    single.pop("prev_output_tokens", None)
    return single


def teacher_forced_scores(model, net_input: Dict, tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """Log-probability of every token of ``tokens`` (a hypothesis ending in
    ``</s>``) under one full forward pass over it, decoder input ``</s>``
    followed by the hypothesis shifted right."""
    target = tokens.unsqueeze(0)
    prev = torch.cat([target.new_full((1, 1), eos), target[:, :-1]], dim=1)
    net_output = model(**net_input, prev_output_tokens=prev)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    return lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[0]


def max_difference(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> Tuple[float, str]:
    """Largest absolute difference over the tensors of two same-keyed dicts, and where."""
    assert set(a) == set(b), (sorted(set(a) ^ set(b)))[:10]
    worst, where = 0.0, ""
    for name in a:
        difference = (a[name].double() - b[name].double()).abs().max().item() if a[name].numel() else 0.0
        if difference > worst:
            worst, where = difference, name
    return worst, where


if __name__ == "__main__":
    import sys

    print(make_contract_data(sys.argv[1]))
