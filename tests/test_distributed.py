"""Multi-GPU readiness: fairseq's data-parallel training (2 gloo workers under
``DistributedFairseqModel``) computes the gradients of one process on the
combined batch, for stock ``transformer`` and ``bart_base`` on the
``multidoc_summarization`` task; and the check fails when it should. Every
mdsfair architecture runs through it in ``tests/test_model_contract.py``."""

import pytest
import torch

from tests.distributed_harness import (
    DDP_BACKENDS,
    KNOWN_STOCHASTIC_ARGS,
    WRAPPER_CLASS_NAMES,
    WorkerRun,
    check_data_parallel_results,
    compare_tensors,
    data_parallel_train_steps,
    parse_training_config,
    single_threaded,
    split_examples,
    train_steps,
)
from tests.utils import TINY_BART_ARGS, make_tiny_data_bin, tiny_transformer

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

SHORT_SOURCES = ["--max-source-positions", "128", "--max-target-positions", "128"]
TINY_TRANSFORMER_ARGS = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(embed_dim=32, ffn_embed_dim=64, attention_heads=4, share_all_embeddings=False),
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--dropout",
    "0",
    "--attention-dropout",
    "0",
    "--activation-dropout",
    "0",
    *SHORT_SOURCES,
]
TINY_BART_BASE_ARGS = [
    "--task",
    "multidoc_summarization",
    *TINY_BART_ARGS,
    *SHORT_SOURCES,
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
]
EXAMPLES = [0, 1, 2, 3]
STEPS = 2
# ranks initialized from different seeds, to show what the check catches
MISMATCHED_SEEDS = [WorkerRun(backend, model_seeds=(1, 2)) for backend in DDP_BACKENDS]
# stock bart_base in the same spawn of the workers
BART_BASE_RUNS = [
    WorkerRun(backend, train_args=tuple(TINY_BART_BASE_ARGS), name="bart_base") for backend in DDP_BACKENDS
]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("distributed")), train=8, valid=4, test=4)


@pytest.fixture(scope="module")
def transformer_cfg(data_bin):
    return parse_training_config(TINY_TRANSFORMER_ARGS, data_bin)


@pytest.fixture(scope="module")
def transformer_reference(transformer_cfg):
    with single_threaded():
        return train_steps(transformer_cfg, EXAMPLES, STEPS)


@pytest.fixture(scope="module")
def transformer_runs(data_bin):
    """One spawn of 2 workers: both backends as fairseq-train runs them, then
    both again with rank-dependent initialization, then stock bart_base."""
    return data_parallel_train_steps(
        TINY_TRANSFORMER_ARGS,
        data_bin,
        split_examples(EXAMPLES, 2),
        [*DDP_BACKENDS, *MISMATCHED_SEEDS, *BART_BASE_RUNS],
        steps=STEPS,
    )


@pytest.fixture(scope="module")
def transformer_workers(transformer_runs):
    return {backend: transformer_runs[backend] for backend in DDP_BACKENDS}


def test_transformer_gradients_equal_one_process(transformer_reference, transformer_workers):
    report = check_data_parallel_results(transformer_reference, transformer_workers, atol=1e-5, rtol=1e-4)
    assert set(report) == set(DDP_BACKENDS)
    names = set(transformer_reference["gradients"][0])
    assert any(name.startswith("encoder.layers.0.") for name in names)
    for backend, differences in report.items():
        assert set(differences) == names
        assert max(differences.values()) < 1e-5
    # the comparison is not vacuous: nearly every tensor has a gradient, and
    # the second step's gradients (after one SGD update) differ from the first
    first, second = transformer_reference["gradients"]
    assert sum(bool(g.any()) for g in first.values()) >= len(first) - 1
    assert any(not torch.equal(first[name], second[name]) for name in names)


def test_workers_split_the_batch_and_share_the_update(transformer_reference, transformer_workers):
    assert transformer_reference["example_ids"] == EXAMPLES
    for backend, (rank0, rank1) in transformer_workers.items():
        assert (rank0["example_ids"], rank1["example_ids"]) == ([0, 1], [2, 3])
        assert WRAPPER_CLASS_NAMES[backend] in rank0["wrapper_classes"]
        for name, param in rank0["updated_parameters"].items():
            assert torch.equal(param, rank1["updated_parameters"][name])
        # SGD moved the replicas exactly as it moved the single process
        compare_tensors(transformer_reference["updated_parameters"], rank0["updated_parameters"], 1e-6, 1e-5, backend)


def test_check_fails_when_a_worker_sees_another_example(transformer_cfg, transformer_workers):
    """The workers trained on examples 0-3; the gradients of a reference on
    0, 1, 2, 5 (labelled as 0-3, so only the numbers can tell) differ."""
    with single_threaded():
        perturbed_reference = train_steps(transformer_cfg, [0, 1, 2, 5], STEPS)
    perturbed_reference["example_ids"] = EXAMPLES
    with pytest.raises(AssertionError, match=r"gradients of step 1, rank 0 of 2 vs one process.*worst"):
        check_data_parallel_results(perturbed_reference, transformer_workers, atol=1e-5, rtol=1e-4)


def test_check_fails_when_workers_do_not_split_the_batch(transformer_reference, transformer_workers):
    whole_batch_on_every_rank = {
        backend: [{**result, "example_ids": EXAMPLES} for result in ranks]
        for backend, ranks in transformer_workers.items()
    }
    with pytest.raises(AssertionError, match="do not split the reference batch"):
        check_data_parallel_results(transformer_reference, whole_batch_on_every_rank, atol=1e-5, rtol=1e-4)


def test_check_fails_when_ranks_initialize_differently(transformer_reference, transformer_runs):
    """With per-rank seeds, pytorch_ddp still agrees (DDP broadcasts rank 0's
    parameters when it wraps), legacy_ddp does not broadcast and must fail."""
    pytorch_ddp, legacy_ddp = (run.label for run in MISMATCHED_SEEDS)
    report = check_data_parallel_results(
        transformer_reference, {pytorch_ddp: transformer_runs[pytorch_ddp]}, 1e-5, 1e-4
    )
    assert max(report[pytorch_ddp].values()) < 1e-5
    with pytest.raises(AssertionError, match=r"legacy_ddp/seeds=1,2: parameters after wrapping, rank 1 vs rank 0"):
        check_data_parallel_results(transformer_reference, {legacy_ddp: transformer_runs[legacy_ddp]}, 1e-5, 1e-4)


def test_bart_base_gradients_equal_one_process(data_bin, transformer_runs):
    with single_threaded():
        reference = train_steps(parse_training_config(TINY_BART_BASE_ARGS, data_bin), EXAMPLES, STEPS)
    report = check_data_parallel_results(
        reference, {run.label: transformer_runs[run.label] for run in BART_BASE_RUNS}, atol=1e-5, rtol=1e-4
    )
    assert set(report) == {"bart_base/pytorch_ddp", "bart_base/legacy_ddp"}
    for differences in report.values():
        assert "encoder.layers.1.fc2.weight" in differences
        assert max(differences.values()) < 1e-5


def test_parse_switches_off_dropout_like_randomness(data_bin):
    cfg = parse_training_config(
        [
            "--task",
            "multidoc_summarization",
            *TINY_BART_ARGS,
            "--dropout",
            "0.3",
            "--attention-dropout",
            "0.2",
            "--encoder-layerdrop",
            "0.1",
        ],
        data_bin,
    )
    for name in KNOWN_STOCHASTIC_ARGS:
        assert getattr(cfg.model, name) == 0, name
    assert cfg.model.adaptive_softmax_dropout == 0 and cfg.model.encoder_attention_heads == 4
    assert cfg.common.cpu and cfg.common.user_dir.endswith("mdsfair")
    assert cfg.optimizer._name == "sgd"


def test_split_and_compare_errors():
    assert split_examples([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="cannot be shared"):
        split_examples([0], 2)
    with pytest.raises(AssertionError, match="names differ"):
        compare_tensors({"a": torch.zeros(2)}, {"b": torch.zeros(2)}, 0, 0, "x")
    with pytest.raises(AssertionError, match="shape"):
        compare_tensors({"a": torch.zeros(2)}, {"a": torch.zeros(3)}, 0, 0, "x")
    differences = compare_tensors({"a": torch.zeros(2)}, {"a": torch.tensor([0.0, 1e-7])}, 1e-6, 0, "x")
    assert differences["a"] == pytest.approx(1e-7)
