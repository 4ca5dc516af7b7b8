"""A generation step's products taken as ``W x^T`` (mdsfair.generation.fast.step_linear)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import harness, operator_counts
from mdsfair.generation.fast import step_linear as step_linear_module
from mdsfair.generation.fast.static_beam_search import following_static_beam_search
from mdsfair.generation.fast.step_linear import (
    ROW_MAJOR_BLOCK_ELEMENTS,
    TRANSPOSED_ROWS,
    row_major_product,
    rows_times_weight,
    step_linear,
)


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


def test_step_linear_keeps_its_bias_column_and_follows_the_parameters():
    linear = nn.Linear(16, 24)
    x = torch.randn(1, 12, 16)
    with torch.no_grad():
        first = step_linear(linear, x)
        assert first.shape == (1, 12, 24) and not first.is_contiguous()
        torch.testing.assert_close(first, linear(x), **float32_tolerance(16))
        linear.bias.add_(1.0)  # in place: the kept column is rebuilt
        torch.testing.assert_close(step_linear(linear, x), linear(x), **float32_tolerance(16))


def test_a_linear_with_hooks_is_called_as_it_is():
    linear, calls = nn.Linear(16, 8), []
    linear.register_forward_pre_hook(lambda module, inputs: calls.append(1))
    with torch.no_grad():
        out = step_linear(linear, torch.randn(12, 16))
    assert calls == [1] and out.is_contiguous()


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


@pytest.mark.parametrize(
    "rows,features,bias",
    [
        (16, 5 * ROW_MAJOR_BLOCK_ELEMENTS // 16, False),  # whole blocks only
        (16, 50265, False),  # BART's vocabulary: whole blocks and a remainder
        (12, 3 * ROW_MAJOR_BLOCK_ELEMENTS // 12 + 7, True),  # a remainder, a bias
        (48, 2 * ROW_MAJOR_BLOCK_ELEMENTS // 48 + 1, True),
        (16, ROW_MAJOR_BLOCK_ELEMENTS // 16, True),  # one block: one product, one copy
    ],
)
def test_row_major_product_is_the_product_block_by_block(monkeypatch, rows, features, bias):
    """Each block of output features is its own W x^T product, copied into
    the rows: the result is contiguous, each block equals that product
    exactly, and the whole is F.linear's to float64 rounding."""
    generator = torch.Generator().manual_seed(rows + features)
    weight = torch.randn(features, 24, generator=generator, dtype=torch.float64)
    bias_column = torch.randn(features, 1, generator=generator, dtype=torch.float64) if bias else None
    x = torch.randn(rows, 24, generator=generator, dtype=torch.float64)
    products = []
    mm, addmm = torch.mm, torch.addmm
    monkeypatch.setattr(torch, "mm", lambda *a: products.append(a[0].size(0)) or mm(*a))
    monkeypatch.setattr(torch, "addmm", lambda *a: products.append(a[1].size(0)) or addmm(*a))
    result = row_major_product(x, weight, bias_column)
    monkeypatch.undo()
    block = ROW_MAJOR_BLOCK_ELEMENTS // rows
    assert products == [min(block, features - start) for start in range(0, features, block)]
    assert result.is_contiguous() and result.shape == (rows, features)
    for start in range(0, features, block):
        # the same call on the block's rows of the weight (addmm adds the bias inside the product: on some
        # CPUs that rounds differently from a product followed by an addition)
        if bias:
            part = torch.addmm(bias_column[start : start + block], weight[start : start + block], x.t())
        else:
            part = torch.mm(weight[start : start + block], x.t())
        assert torch.equal(result[:, start : start + block], part.t())
    reference = F.linear(x, weight, None if bias_column is None else bias_column.squeeze(1))
    eps = torch.finfo(torch.float64).eps  # another summation order: a few roundings per term
    torch.testing.assert_close(result, reference, atol=4 * 24 * eps, rtol=4 * 24 * eps)


def test_step_linear_contiguous_gives_row_major_logits():
    linear = nn.Linear(16, 3 * ROW_MAJOR_BLOCK_ELEMENTS // 12 + 5)
    x = torch.randn(12, 1, 16)
    with torch.no_grad():
        as_view, as_rows = step_linear(linear, x), step_linear(linear, x, contiguous=True)
    assert not as_view.is_contiguous() and as_rows.is_contiguous()
    torch.testing.assert_close(as_rows, as_view, **float32_tolerance(16))  # blocks: another product call
