"""Golden outputs of every generating mdsfair architecture, recorded once by
the code *before* the models were rebuilt from shared components (issue 31),
and kept as test fixtures under ``tests/fixtures/golden/``.

Per architecture (``tests/fixtures/golden/<arch>/``):

* ``checkpoint.pt`` -- a checkpoint written by fairseq's ``Trainer`` as
  ``fairseq-train`` writes it (tiny dimensions, the contract's data-bin,
  weights perturbed by seeded noise so beams are distinct);
* ``batch.pt`` -- three validation clusters as the task collates them (every
  side input of the data contract, unfiltered);
* ``golden.pt`` -- the teacher-forced log-probabilities of the batch's
  targets in float64 (``lprobs [B, T, V]``) and the best beam of each cluster
  (beam 3, in float64), with their positional scores.

``tests/fixtures/golden/data-bin`` is the data-bin the checkpoints were
trained on (the same dictionary and subword model, so mdsfair's checkpoint
checks accept them). ``tests/test_golden_outputs.py`` reloads every
checkpoint with today's code and compares.

Recording (done once, before the change; rerunning it overwrites the
fixtures, which defeats their purpose)::

    python -m tests.golden_outputs record tests/fixtures/golden
"""

import copy
import os
import shutil
import sys
from typing import Dict, List

import torch

from tests import model_contract as contract

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "golden")
#: The architectures whose golden outputs are recorded under :data:`GOLDEN_DIR`.
ARCHITECTURES = sorted(
    name for name in os.listdir(GOLDEN_DIR) if os.path.isfile(os.path.join(GOLDEN_DIR, name, "golden.pt"))
)
#: The three validation clusters of the contract's data-bin that every architecture decodes.
EXAMPLES = 3
GENERATION = {"beam": 3, "max_len_b": 8, "min_len": 3, "max_len_a": 0}
NOISE = 0.5


def golden_architectures() -> List[str]:
    return [arch for arch in contract.mdsfair_architectures() if contract.family(arch).generates]


def perturb(model, seed: int = 0) -> None:
    """Seeded noise on every parameter (a sharper model than the
    initialization: distinct hypotheses), as the contract's beam test does."""
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator, dtype=torch.float32) * NOISE)


def generation_config(cfg):
    gen_cfg = copy.deepcopy(cfg.generation)
    for name, value in GENERATION.items():
        setattr(gen_cfg, name, value)
    return gen_cfg


def model_inputs(task, model, sample: Dict) -> Dict:
    """``sample``'s net input as the task hands it to ``model``."""
    return task._sample_for(model, sample)["net_input"]


def teacher_forced_lprobs(task, model, sample: Dict) -> torch.Tensor:
    with torch.no_grad():
        logits = model(**model_inputs(task, model, sample))[0]
        # fairseq's get_normalized_probs casts to float32: the log-softmax here keeps float64
        return torch.log_softmax(logits, dim=-1)


def best_beams(task, model, cfg, sample: Dict) -> List[Dict[str, torch.Tensor]]:
    generator = task.build_generator([model], generation_config(cfg))
    with torch.no_grad():
        hypotheses = task.inference_step(generator, [model], sample)
    return [
        {"tokens": beams[0]["tokens"].clone(), "positional_scores": beams[0]["positional_scores"].clone()}
        for beams in hypotheses
    ]


def load(arch: str):
    """The recorded checkpoint of ``arch`` through fairseq's loader, in
    float64 and evaluation mode: ``(model, cfg, task)``."""
    from fairseq import checkpoint_utils

    import mdsfair

    mdsfair.register()  # mdsfair's checkpoint loading (mdsfair.fairseq_patches)
    path = os.path.join(GOLDEN_DIR, arch, "checkpoint.pt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": os.path.join(GOLDEN_DIR, "data-bin")}
    )
    return models[0].double().eval(), cfg, task


def record(out_dir: str) -> None:
    import tempfile

    from fairseq.trainer import Trainer

    # one intra-op thread, as the test session runs (tests/conftest.py): PageSum's
    # float64 forward passes through float32 steps whose sums depend on the thread count
    torch.set_num_threads(1)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        data = contract.make_contract_data(work)
        shutil.copytree(data["data-bin"], os.path.join(out_dir, "data-bin"), dirs_exist_ok=True)
        for arch in golden_architectures():
            built = contract.ContractModel(arch, data)
            model = built.build_model()
            perturb(model)
            arch_dir = os.path.join(out_dir, arch)
            os.makedirs(arch_dir, exist_ok=True)
            trainer = Trainer(built.cfg, built.task, model, built.build_criterion())
            trainer.consolidate_optimizer()
            trainer.save_checkpoint(
                os.path.join(arch_dir, "checkpoint.pt"), {"train_iterator": {"epoch": 1}, "val_loss": None}
            )
            sample = built.batch("valid", built.shortest("valid", EXAMPLES))
            torch.save(sample, os.path.join(arch_dir, "batch.pt"))
            model = model.double().eval()
            lprobs = teacher_forced_lprobs(built.task, model, sample)
            beams = best_beams(built.task, model, built.cfg, sample)
            torch.save(
                {"lprobs": lprobs, "beams": beams, "generation": dict(GENERATION)}, os.path.join(arch_dir, "golden.pt")
            )
            print(arch, tuple(lprobs.shape), [b["tokens"].tolist() for b in beams], flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.golden_outputs record OUT_DIR")
    record(sys.argv[2])
