"""The sparse cross-attention (Manakul & Gales 2021) on T5's backbone (issue
44): ``t5_v1_1_tiny --cross-attention sparse`` builds its word-level
attention as T5's (projections without biases, unscaled scores), runs the
model contract (incremental = full decoding, padding and batch
composition; on LongT5 too), trains with the sparse task and its KL
criterion, generates
through the hub from an imported T5 (the approximator created on restore,
App. A.1), and its fast generation step (``--static-decoding``) gives the
reference's logits and beams in float64. With r covering every sentence and
exact selection it is T5's full cross-attention on the same weights: the
sparse attention is the full attention restricted to the selected
sentences (Sec. 3, Eq. 3-6)."""

import copy

import pytest
import torch

from mdsfair.generation.fast import make_generation_fast_
from mdsfair.generation.fast.sparse_generation_step import SparseGenerationStep
from mdsfair.modules.sparse_cross_attention import SparseCrossAttention
from tests import contract_checks as checks
from tests import model_contract as contract
from tests.generation_checks import (
    assert_fast_incremental_logits,
    assert_same_beams,
    generate,
    sparse_attention_classes,
)
from tests.t5_family_checks import assert_contract_and_training, t5_backbone_data
from tests.t5_fixtures import tiny_hf_t5

PAPER = "/work/shared/papers/sparse-encdec-attention-manakul2021.txt"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return t5_backbone_data(tmp_path_factory, "sparse_t5")


def sparse_t5(data, *flags: str, arch: str = "t5_v1_1_tiny"):
    """``arch --cross-attention sparse`` with ``flags``, on the sparse task
    and its KL criterion: ``(ContractModel, model)``."""
    built = contract.ContractModel(
        arch, data, "--cross-attention", "sparse", *flags, model_family=contract.SPARSE_SUMMARIZER
    )
    return built, built.build_model()


def test_the_sparse_cross_attention_follows_t5s_backbone(data):
    """No biases in its projections, unscaled word-level scores, and the
    approximator's W^Q/W^K initialised from the cross-attention's
    projections with zero biases (App. A.1)."""
    _built, model = sparse_t5(data)
    for layer in model.decoder.layers:
        attention = layer.encoder_attn
        assert type(attention) is SparseCrossAttention and attention.scaling == 1.0
        assert all(getattr(attention, name).bias is None for name in ("q_proj", "k_proj", "v_proj", "out_proj"))
        approximator = attention.sentence_attention
        assert torch.equal(approximator.sentence_query_proj.weight, attention.q_proj.weight)
        assert torch.equal(approximator.sentence_key_proj.weight, attention.k_proj.weight)
        assert not approximator.sentence_query_proj.bias.any() and not approximator.sentence_key_proj.bias.any()


@pytest.mark.parametrize("arch", ["t5_v1_1_tiny", "longt5_tiny"])
def test_the_contract_and_a_falling_loss_with_the_sparse_task(data, arch):
    """Incremental beam search gives the full forward's scores, padding and
    batch composition change no example's output, and four training steps
    of ``multidoc_summarization_sparse`` with ``sparse_kl`` lower the loss
    (T5 v1.1, and LongT5 with its transient-global encoder attention)."""
    built, model = sparse_t5(data, arch=arch)
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert built.build_criterion().__class__.__name__ == "SparseKLCriterion"
    assert_contract_and_training(built, model)


def test_the_paper_restricts_the_full_attention_to_the_selected_sentences():
    """The fact the equivalence below checks, read from the paper (Sec. 3):
    the subset attention's keys and values are those at the positions of the
    top-r sentences (Eq. 6), so with every sentence selected they are all of
    them, the vanilla model's attention (Table 2's row "All")."""
    with open(PAPER, encoding="utf-8") as paper:
        text = paper.read()
    assert "Irm = [(i, j) s.t. i \u2208 top-r(\u03b1sm,i)] (6)" in text
    assert "K\u0302m = [ki,j : (i, j) \u2208 Irm], and the same method\nis applied to obtain V\u0302m" in text
    assert "Vanilla All N/A" in text


def test_every_sentence_kept_is_t5s_full_cross_attention_in_float64(data):
    """Exact selection (``ideal``, Eq. 4) with r above the sources' sentence
    count keeps every sentence, and the sparse model's logits are then the
    full T5 cross-attention's on the same weights (float64, the softmax of
    both in float64); with r = 1 they are not."""
    full_built = contract.ContractModel("t5_v1_1_tiny", data)
    full = full_built.build_model()
    checks.perturb_parameters(full, seed=3)
    indices = [0, 1, 2]
    outputs = {}
    for top_r in ("1000", "1"):
        built, sparse = sparse_t5(data, "--sentence-selection", "ideal", "--top-r", top_r)
        missing, unexpected = sparse.load_state_dict(full.state_dict(), strict=False)
        assert not unexpected and all("sentence" in name for name in missing)
        sparse = sparse.double().eval()
        net_input = built.batch("valid", indices, sparse)["net_input"]
        with torch.no_grad():
            logits, extra = sparse(**net_input)
        outputs[top_r] = logits
        if top_r == "1000":
            for attention in extra["sentence_attention"]:
                kept = attention.selection.sum(-1)  # [B, T]: every real sentence of the row's source
                assert torch.equal(kept, attention.sentence_mask.sum(-1, keepdim=True).expand_as(kept))
    full = full.double().eval()
    with torch.no_grad():
        expected, _ = full(**full_built.batch("valid", indices, full)["net_input"])
    # two computations of one function in float64: a tolerance of float64's round-off
    torch.testing.assert_close(outputs["1000"], expected, rtol=1e-10, atol=1e-10 * expected.abs().max().item())
    assert not torch.allclose(outputs["1"], expected, rtol=1e-4, atol=1e-4)


def test_the_fast_generation_step_gives_the_reference_logits_and_beams_in_float64(data, monkeypatch):
    """``make_generation_fast_`` swaps the fast step in on T5's backbone:
    five incremental steps over beam-expanded rows give the reference's
    logits to float64 round-off (the fast step running at every layer and
    step), and the static generator's beams are fairseq's on the reference."""
    built, model = sparse_t5(data, "--sparse-generation-path", "gather")
    checks.perturb_parameters(model, seed=2)
    reference = model.double().eval()
    fast = make_generation_fast_(copy.deepcopy(reference))
    assert sparse_attention_classes(fast) == {SparseGenerationStep}
    sample = built.batch("valid", [0, 1, 2], reference)
    calls = assert_fast_incremental_logits(reference, fast, sample, monkeypatch)
    assert len(calls) == 5 * len(fast.decoder.layers)
    dynamic = generate(built.task, reference, built.cfg, sample, static=False)
    static_fast = generate(built.task, fast, built.cfg, sample, static=True)
    assert_same_beams(static_fast, dynamic)
    assert all(len(hypotheses[0]["tokens"]) for hypotheses in dynamic)


def test_an_imported_t5_generates_with_the_sparse_cross_attention_through_the_hub(tmp_path):
    """An imported T5 v1.1 loaded through the hub with ``cross_attention=
    "sparse"``: the approximator is created (W^Q/W^K from the imported
    cross-attention's projections, App. A.1), the imported weights stay in
    place and a summary is generated."""
    import mdsfair
    from mdsfair.importers.hf_t5 import import_hf_t5
    from mdsfair.models.t5 import T5Model
    from tests.hf_t5_family import real_lines

    mdsfair.register()
    imported = str(tmp_path / "imported")
    import_hf_t5(tiny_hf_t5(str(tmp_path / "hf")), imported)
    hub = T5Model.from_pretrained(imported, checkpoint_file="model.pt", cross_attention="sparse", top_r=2)
    model = hub.models[0]
    assert model.decoder.cross_attention_component.name == "sparse"
    state = torch.load(f"{imported}/model.pt", weights_only=False)["model"]
    attention = model.decoder.layers[0].encoder_attn
    assert torch.equal(
        attention.q_proj.weight, state["decoder.layers.0.encoder_attn.q_proj.weight"].to(attention.q_proj.weight)
    )
    assert torch.equal(attention.sentence_attention.sentence_query_proj.weight, attention.q_proj.weight)
    lines = real_lines()
    summaries = hub.summarize([[lines[3], lines[4]], [lines[1], lines[2]]], beam=2, max_len_b=8)
    assert len(summaries) == 2 and all(isinstance(summary, str) for summary in summaries)
