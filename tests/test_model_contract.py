"""The model contract, run by every registered mdsfair architecture.

Each test is parametrized over :func:`tests.model_contract.mdsfair_architectures`
(fairseq's ``ARCH_MODEL_REGISTRY``, model classes in ``mdsfair.*``), each
architecture at its model's tiny dimensions. Per-architecture test files keep
only what is specific to a system (its equations, the authors' code).

* forward shapes; results independent of batch padding and composition;
* incremental decoding (beam search, reordered states) equals full decoding;
* save / load round trip through fairseq's Trainer and checkpoint loader;
* the hub interface equals fairseq-generate's path (the task's generator on
  the binarized split) on the raw clusters;
* bf16 and fp16 forward and backward finite and close to fp32;
* ``--checkpoint-activations`` / ``--offload-activations``: every layer
  wrapped, identical loss and gradients;
* ``--update-freq 2`` at batch 2 equals batch 4 (fairseq's Trainer);
* 2-process data-parallel gradients (gloo, one spawn for all architectures)
  equal one process on the combined batch.
"""

import copy

import pytest
import torch

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.distributed_harness import (
    WorkerRun,
    check_data_parallel_results,
    data_parallel_train_steps,
    single_threaded,
    train_steps,
)
from tests.tolerances import assert_close_in_dtype

ARCHITECTURES = contract.mdsfair_architectures()
GENERATING = [arch for arch in ARCHITECTURES if contract.family(arch).generates]
TRAIN_EXAMPLES = [0, 1, 2, 3]
SHARDS = [[0, 1], [2, 3]]
STEPS = 2
GENERATION = {"beam": 2, "max_len_b": 6, "min_len": 2}

#: Architectures whose encoder output depends on how much padding the batch adds (not only
#: through rounding): LSH attention lays its hashing rounds end to end before cutting them into
#: chunks, so the padding of one round moves the chunk boundaries of the next (Reformer's and
#: the authors' layout; tests/test_efficient_encoders.py checks the effect). Their hub check
#: batches the clusters as the task does.
PADDING_DEPENDENT = {"lsh_bart_tiny"}


_BUILT = {}


def built(arch, contract_data, *extra):
    """The :class:`ContractModel` of ``arch`` (cached per flags)."""
    key = (arch, extra)
    if key not in _BUILT:
        _BUILT[key] = contract.ContractModel(arch, contract_data, *extra)
    return _BUILT[key]


# ----------------------------------------------------------- registration


def test_every_architecture_is_found_and_has_a_tiny_configuration():
    assert {
        "hiertransformer",
        "hierencdec_bart_tiny",
        "pagesum_bart_base",
        "sparse_bart_large",
        "dape_transformer",
        "paragraph_ranker",
    } <= set(ARCHITECTURES)
    missing = []
    for arch in ARCHITECTURES:
        try:
            sizes = contract.tiny_configuration(arch)
        except LookupError as error:
            missing.append(str(error))
            continue
        assert sizes and max(sizes.values()) <= 64, (arch, sizes)
    assert not missing, "\n".join(missing)


def test_a_model_without_tiny_architecture_fails_the_contract():
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    ARCH_MODEL_NAME_REGISTRY["contract_probe"] = "contract_probe_model"
    ARCH_MODEL_REGISTRY["contract_probe"] = MODEL_REGISTRY["hiertransformer"]
    try:
        with pytest.raises(LookupError, match="contract_probe_model_tiny"):
            contract.tiny_configuration("contract_probe")
    finally:
        del ARCH_MODEL_NAME_REGISTRY["contract_probe"], ARCH_MODEL_REGISTRY["contract_probe"]


# ------------------------------------------------------------------ forward


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_forward_shapes_and_padding_and_batch_composition(arch, contract_data):
    """Output shapes; every example's outputs are those it gets alone (no
    padding) and in a batch of another composition and order."""
    built_model = built(arch, contract_data)
    checks.check_forward_shapes_padding_and_batch_composition(built_model, built_model.build_model().eval())


@pytest.mark.parametrize("arch", GENERATING)
def test_incremental_beam_search_equals_full_decoding(arch, contract_data):
    """Beam search (incremental states, reordered encoder outputs, batch 3)
    gives every hypothesis the scores one full forward pass gives it."""
    built_model = built(arch, contract_data)
    model = built_model.build_model().eval()
    checks.perturb_parameters(model, seed=0)
    checks.check_incremental_beam_search_equals_full_decoding(built_model, model)


# -------------------------------------------------------- save and reload


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_save_and_load_round_trip(arch, contract_data, tmp_path):
    built_model = built(arch, contract_data)
    checks.check_save_and_load_round_trip(built_model, built_model.build_model(), str(tmp_path / "checkpoint.pt"))


# --------------------------------------------------- hub == fairseq-generate


@pytest.mark.parametrize("arch", GENERATING)
def test_hub_equals_the_task_generator_on_the_binarized_split(arch, contract_data):
    """fairseq-generate's path (the task's generator and ``inference_step``
    over the binarized test split) and the hub interface on the raw test
    clusters give the same hypotheses and scores."""
    import json
    import os

    from mdsfair.hub_interface import MultiDocSummarizationHubInterface

    built_model = built(arch, contract_data)
    model = built_model.build_model().eval()
    checks.perturb_parameters(model, seed=1)
    task = built_model.task
    dataset = built_model.dataset("test")
    gen_cfg = copy.deepcopy(built_model.cfg.generation)
    gen_cfg.beam, gen_cfg.max_len_b, gen_cfg.min_len, gen_cfg.max_len_a = (
        GENERATION["beam"],
        GENERATION["max_len_b"],
        GENERATION["min_len"],
        0,
    )
    sequence_generator = task.build_generator([model], gen_cfg)
    generated = {}
    with torch.no_grad():
        for start in range(0, len(dataset), 2):
            sample = contract.to_test_device(
                dataset.collater([dataset[i] for i in range(start, min(start + 2, len(dataset)))])
            )
            hypotheses = task.inference_step(sequence_generator, [model], sample)
            for index, hypotheses_of_one in zip(sample["id"].tolist(), hypotheses):
                generated[index] = hypotheses_of_one[0]
    hub = MultiDocSummarizationHubInterface(built_model.cfg, task, [model])
    raw_test = os.path.join(contract_data["raw"], "test.jsonl")
    clusters = [json.loads(line) for line in open(raw_test, encoding="utf-8")]
    assert len(clusters) == len(dataset) == len(generated)
    # the hub batches 3 clusters where the task batched 2, so the padding differs, except for LSH:
    # its output depends on the batch's padding (see PADDING_DEPENDENT)
    hub_batch = 2 if arch in PADDING_DEPENDENT else 3
    for index, hypotheses in enumerate(hub.generate(clusters, batch_size=hub_batch, **GENERATION)):
        assert torch.equal(hypotheses[0]["tokens"], generated[index]["tokens"]), (arch, index)
        assert hypotheses[0]["score"].item() == pytest.approx(generated[index]["score"].item(), abs=1e-4)


# ------------------------------------------------------------ half precision

HALF_TOLERANCES = {  # relative loss difference, 1 - cosine of the gradients
    torch.bfloat16: (3e-2, 2e-2),
    torch.float16: (5e-3, 2e-3),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_half_precision_forward_and_backward_close_to_fp32(arch, contract_data, dtype):
    """CPU kernels stand in for the GPU's: the loss and every gradient stay
    finite, the loss and the gradient direction stay close to fp32 (masks
    use dtype-aware fill values)."""
    built_model = built(arch, contract_data)
    criterion = built_model.build_criterion()
    model = built_model.build_model().train()
    sample = built_model.batch("train", TRAIN_EXAMPLES, model)
    loss, sample_size, gradients = contract.loss_and_gradients(model, criterion, sample)

    def to_half(tensor):
        return tensor.to(dtype) if tensor.is_floating_point() else tensor

    from fairseq import utils

    half_model = built_model.build_model().to(dtype).train()
    half_sample = utils.apply_to_sample(to_half, sample)
    half_loss, _, half_gradients = contract.loss_and_gradients(half_model, criterion, half_sample)
    assert torch.isfinite(half_loss), (arch, half_loss)
    not_finite = [name for name, gradient in half_gradients.items() if not torch.isfinite(gradient).all()]
    assert not not_finite, not_finite[:5]
    loss_tolerance, direction_tolerance = HALF_TOLERANCES[dtype]
    relative_loss_difference = abs(half_loss.item() - loss.item()) / abs(loss.item())
    assert relative_loss_difference <= loss_tolerance, (arch, loss.item(), half_loss.item())
    full, half = contract.flat_gradient(gradients), contract.flat_gradient(half_gradients)
    cosine = torch.nn.functional.cosine_similarity(full.double(), half.double(), dim=0).item()
    assert 1 - cosine <= direction_tolerance, (arch, cosine)


# --------------------------------------------------- activation checkpointing


def layers_outside_checkpoints(model):
    """Elements of the model's ``nn.ModuleList``s (its layers) that are not
    checkpointed and not inside a checkpointed module."""
    checkpointed = [name for name, module in model.named_modules() if hasattr(module, "precheckpoint_forward")]
    inside = lambda name: any(name == c or name.startswith(c + ".") for c in checkpointed)  # noqa: E731
    missing = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and not inside(name):
            for index, layer in enumerate(module):
                if any(True for _ in layer.parameters()) and not inside(f"{name}.{index}"):
                    missing.append(f"{name}.{index}")
    return checkpointed, missing


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_activation_checkpointing_wraps_every_layer_and_changes_nothing(arch, contract_data, flag):
    built_model = built(arch, contract_data)
    criterion = built_model.build_criterion()
    plain = built_model.build_model().train()
    sample = built_model.batch("train", TRAIN_EXAMPLES, plain)
    loss, _, gradients = contract.loss_and_gradients(plain, criterion, sample)
    checkpointing = built(arch, contract_data, flag)
    model = checkpointing.build_model().train()
    checkpointed, missing = layers_outside_checkpoints(model)
    assert checkpointed and not missing, (arch, checkpointed, missing)
    assert not layers_outside_checkpoints(plain)[0]
    checkpointed_loss, _, checkpointed_gradients = contract.loss_and_gradients(model, criterion, sample)
    assert torch.equal(checkpointed_loss, loss), (arch, loss.item(), checkpointed_loss.item())
    # the same operations; only the order gradients of shared tensors are
    # summed in may differ: rounding, a tolerance of the dtype and each
    # gradient's scale (T5's initialisation gives larger gradients than BART's)
    assert set(checkpointed_gradients) == set(gradients)
    for name, gradient in gradients.items():
        assert_close_in_dtype(checkpointed_gradients[name], gradient, msg=f"{arch}: {name}")
    assert contract.flat_gradient(gradients).abs().sum() > 0


# ------------------------------------------- update-freq and data parallelism


@pytest.fixture(scope="module")
def one_process_reference(contract_data):
    """One process, batch of examples 0-3, two Trainer steps, per architecture."""
    references = {}
    with single_threaded():
        for arch in ARCHITECTURES:
            built_model = built(arch, contract_data)
            references[arch] = train_steps(built_model.cfg, TRAIN_EXAMPLES, STEPS)
    return references


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_update_freq_2_at_batch_2_equals_batch_4(arch, contract_data, one_process_reference):
    built_model = built(arch, contract_data)
    with single_threaded():
        accumulated = train_steps(built_model.cfg, SHARDS, STEPS)
    reference = one_process_reference[arch]
    assert accumulated["example_ids"] == reference["example_ids"]
    for step in range(STEPS):
        difference, where = contract.max_difference(reference["gradients"][step], accumulated["gradients"][step])
        assert difference <= 1e-5, (arch, step, where, difference)
    assert any(gradient.any() for gradient in reference["gradients"][0].values())


@pytest.fixture(scope="module")
def data_parallel_runs(contract_data):
    """Two gloo workers (one spawn), each training every architecture on its
    half of the batch under fairseq's ``pytorch_ddp`` wrapper."""
    if contract.test_device().type != "cpu":
        pytest.skip("the gloo workers train on CPU; compared with a CPU reference only")
    runs = [
        WorkerRun(
            "pytorch_ddp",
            train_args=tuple(contract.train_args(arch)),
            data_dir=contract_data[contract.family(arch).data],
            name=arch,
        )
        for arch in ARCHITECTURES
    ]
    first = runs[0]
    return data_parallel_train_steps(list(first.train_args), first.data_dir, SHARDS, runs, steps=STEPS)


#: Architectures whose training step draws noise of the batch's shape from the global generator,
#: as their authors' code does: a data-parallel rank draws it for its own rows, so its gradients
#: are not those of one process on the whole batch. Sinkhorn attention's Gumbel noise over the
#: block-sorting scores (mdsfair/modules/sinkhorn_attention.py, gumbel_noise) is one: its step-1
#: gradients differed from one process's beyond 1e-5 on 2026-11-29. Strict, so that a change
#: making them equal is noticed.
BATCH_SHAPED_TRAINING_NOISE = {
    "sinkhorn_bart_tiny": "Gumbel noise of the batch's shape, drawn per rank (authors' training)",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch",
    [
        pytest.param(arch, marks=pytest.mark.xfail(strict=True, reason=BATCH_SHAPED_TRAINING_NOISE[arch]))
        if arch in BATCH_SHAPED_TRAINING_NOISE
        else arch
        for arch in ARCHITECTURES
    ],
)
def test_data_parallel_gradients_equal_one_process(arch, one_process_reference, data_parallel_runs):
    label = f"{arch}/pytorch_ddp"
    report = check_data_parallel_results(
        one_process_reference[arch], {label: data_parallel_runs[label]}, atol=1e-5, rtol=1e-4
    )
    assert max(report[label].values()) < 1e-5
