"""A generation step's products taken as ``W x^T`` or by oneDNN on a packed
weight (mdsfair.generation.fast.step_linear)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import harness, operator_counts
from mdsfair.generation.fast import step_linear as step_linear_module
from mdsfair.generation.fast.static_beam_search import StaticBeamSearch, following_static_beam_search
from mdsfair.generation.fast.step_linear import (
    TRANSPOSED_ROWS,
    StepProductOutputProjection,
    onednn_linear_available,
    packed_product,
    rows_times_weight,
    step_product,
)
from mdsfair.modules.transformer_layers import OutputProjection


def float32_tolerance(inner: int) -> dict:
    """A float32 product of ``inner`` terms summed in another order: a few
    rounding errors of float32 per term at most."""
    eps = torch.finfo(torch.float32).eps
    return {"atol": 4 * inner * eps, "rtol": 4 * inner * eps}


@pytest.mark.parametrize("rows", sorted({TRANSPOSED_ROWS[0], 16, TRANSPOSED_ROWS[1]}))
@pytest.mark.parametrize("with_bias", [True, False])
def test_in_the_window_the_product_is_taken_transposed_with_linears_values(rows, with_bias):
    generator = torch.Generator().manual_seed(rows)
    x, weight = torch.randn(rows, 48, generator=generator), torch.randn(40, 48, generator=generator)
    bias = torch.randn(40, generator=generator) if with_bias else None
    with torch.no_grad():
        product = rows_times_weight(x, weight, bias)
    assert product.shape == (rows, 40) and product.stride() == (1, rows)  # W x^T, seen transposed
    torch.testing.assert_close(product, F.linear(x, weight, bias), **float32_tolerance(48))


@pytest.mark.parametrize("case", ["few rows", "many rows", "float64", "autograd"])
def test_elsewhere_the_product_is_f_linear(case):
    rows = {"few rows": TRANSPOSED_ROWS[0] - 1, "many rows": TRANSPOSED_ROWS[1] + 1}.get(case, 16)
    dtype = torch.float64 if case == "float64" else torch.float32
    x = torch.randn(rows, 24, dtype=dtype, requires_grad=case == "autograd")
    weight, bias = torch.randn(32, 24, dtype=dtype), torch.randn(32, dtype=dtype)
    with torch.set_grad_enabled(case == "autograd"):
        product = rows_times_weight(x, weight, bias)
        assert product.is_contiguous() and torch.equal(product, F.linear(x, weight, bias))
    if case == "autograd":
        product.sum().backward()
        torch.testing.assert_close(x.grad, weight.sum(0).expand(rows, 24))


def test_step_product_keeps_its_bias_column_and_follows_the_parameters():
    linear = nn.Linear(16, 24)
    x = torch.randn(1, 12, 16)
    with torch.no_grad():
        first = step_product(linear, x)
        assert first.shape == (1, 12, 24) and not first.is_contiguous()
        torch.testing.assert_close(first, linear(x), **float32_tolerance(16))
        linear.bias.add_(1.0)  # in place: the kept column is rebuilt
        torch.testing.assert_close(step_product(linear, x), linear(x), **float32_tolerance(16))


needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="this PyTorch has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 4, 16, 64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_packed_product_is_f_linears_product_row_major(rows, with_bias):
    """oneDNN's product on the packed weight, at row counts around its
    layout's hint: row major, F.linear's values to float32 rounding."""
    generator = torch.Generator().manual_seed(rows)
    linear = nn.Linear(48, 1000, bias=with_bias)
    x = torch.randn(rows, 1, 48, generator=generator)
    with torch.no_grad():
        product = packed_product(linear, x)
        assert product.shape == (rows, 1, 1000) and product.is_contiguous()
        torch.testing.assert_close(product, linear(x), **float32_tolerance(48))


@needs_onednn
def test_packed_product_follows_the_parameters():
    """The packed weight is kept while the parameters stay, and rebuilt
    when one changes in place or is replaced."""
    linear = nn.Linear(16, 40)
    x = torch.randn(8, 16)
    with torch.no_grad():
        packed_product(linear, x)
        kept = linear.__dict__["_packed_weight"][1]
        packed_product(linear, x)
        assert linear.__dict__["_packed_weight"][1] is kept
        linear.weight.mul_(2.0)  # in place
        torch.testing.assert_close(packed_product(linear, x), linear(x), **float32_tolerance(16))
        linear.weight = nn.Parameter(torch.randn(40, 16))  # replaced
        torch.testing.assert_close(packed_product(linear, x), linear(x), **float32_tolerance(16))


@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_projection_of_a_static_step_gives_row_major_logits(monkeypatch, onednn, dtype):
    """In a static beam search's step the output projection gives
    nn.Linear's logits, row major: by oneDNN's packed product in float32
    where oneDNN is present, else by the step's product made contiguous
    (F.linear itself in float64)."""
    if onednn and not onednn_linear_available():
        pytest.skip("this PyTorch has no oneDNN linear")
    monkeypatch.setattr(step_linear_module, "onednn_linear_available", lambda: onednn)
    packed = []
    original = step_linear_module.packed_product
    monkeypatch.setattr(step_linear_module, "packed_product", lambda *a: packed.append(1) or original(*a))
    reference = OutputProjection(32, 500, bias=False).to(dtype)
    fast = StepProductOutputProjection(32, 500, bias=False).to(dtype).eval()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(1, 16, 32, dtype=dtype)
    with torch.no_grad(), following_static_beam_search([fast], [StaticBeamSearch(16, 4)]):
        logits = fast(x)
    assert logits.is_contiguous() and bool(packed) == (onednn and dtype == torch.float32)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(logits, reference(x), atol=4 * 32 * eps, rtol=4 * 32 * eps)


@pytest.mark.parametrize("arch,extra", [("sparse_bart_base", {"top_r": 3}), ("multidoc_bart_base", {})])
def test_decoding_steps_with_transposed_products_equal_f_linears(monkeypatch, arch, extra):
    """Every product of a static beam search's decoder step (self-attention,
    feed-forward, output layer) at 8 rows (2 sources x beam 4) taken
    transposed gives the logits of the step with fairseq's F.linear, step
    after step."""
    dictionary = harness.synthetic_dictionary(120)
    dims = harness.dimensions(2, 32, 128, 4, max_source_positions=96, max_target_positions=32)
    model = operator_counts.build(arch, dictionary, **extra, **dims)
    net_input = operator_counts.sentence_source(dictionary, 2, 96, 12)
    if arch != "sparse_bart_base":
        net_input = {k: v for k, v in net_input.items() if k != "src_sent_ids"}
    taken = []
    transposed_product = step_linear_module._transposed_product
    monkeypatch.setattr(
        step_linear_module, "_transposed_product", lambda *args: taken.append(1) or transposed_product(*args)
    )

    def logits(window):
        monkeypatch.setattr(step_linear_module, "TRANSPOSED_ROWS", window)
        state = operator_counts.DecodingState(model, net_input, beam=4, warm_steps=0)
        steps = []
        with torch.no_grad(), following_static_beam_search([model], [state.search]):
            for _ in range(4):
                out, _ = model.decoder(
                    state.tokens, encoder_out=state.encoder_out, incremental_state=state.incremental_state
                )
                state.search.advance()
                steps.append(out[:, -1])
                state.tokens = torch.cat([state.tokens, out[:, -1].argmax(-1, keepdim=True)], dim=1)
        return torch.stack(steps)

    standard = logits((1, 0))
    assert not taken
    transposed_steps = logits(TRANSPOSED_ROWS)
    assert taken  # the transposed products ran
    torch.testing.assert_close(transposed_steps, standard, **float32_tolerance(4 * 32))
