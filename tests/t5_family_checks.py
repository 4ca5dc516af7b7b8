"""What the T5 family's component tests share (``tests/test_t5_backbone.py``,
``tests/test_longt5_backbone.py``): a tiny multi-document data-bin, the
registered T5 and LongT5 tiny architectures built on it by the model
contract's builder (dropout off), and the contract's checks with a few
training steps."""

import torch

from tests import contract_checks as checks
from tests import model_contract as contract


def t5_backbone_data(tmp_path_factory, name: str):
    """A tiny multi-document data-bin for the model contract's builders."""
    from tests.utils import make_tiny_data_bin

    work_dir = str(tmp_path_factory.mktemp(name))
    return {
        "data-bin": make_tiny_data_bin(work_dir, train=8, valid=4, test=4, vocab_size=300, **contract.SYNTHETIC_OPTIONS)
    }


def t5_family(data, arch: str = "t5_v1_1_tiny", *flags: str):
    """The registered architecture ``arch`` (with ``flags``) as fairseq-train
    builds it on ``data``, seeded: ``(ContractModel, model)``."""
    built = contract.ContractModel(arch, data, *flags)
    return built, built.build_model()


def assert_contract_and_training(built, model):
    """The model contract's checks on ``model`` (perturbed, in evaluation):
    incremental beam search gives the full forward's scores, padding and
    batch composition change no example's output; then four training steps
    on one batch give finite losses, the last below the first."""
    from fairseq.trainer import Trainer

    checks.check_incremental_beam_search_equals_full_decoding(built, model)
    checks.check_forward_shapes_padding_and_batch_composition(built, model)
    model.train()
    trainer = Trainer(built.cfg, built.task, model, built.build_criterion())
    train = built.batch("train", [0, 1, 2, 3], model)
    losses = [trainer.train_step([train])["loss"] for _ in range(4)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
