"""What LongT5's blocked attention (:mod:`mdsfair.modules.longt5_attention`)
keeps for the backward pass, and that keeping less left its computation as
it was: the dropout of the attention weights draws the masks ``F.dropout``
draws, and a training step's output and gradients are those of the layer
with ``F.dropout`` (float64)."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from mdsfair.modules import longt5_attention


def attention_and_bias(global_block_size: int, padding_mask, dtype, head_dim: int, dropout: float):
    """One layer's attention in training mode (d 16, 2 heads of
    ``head_dim``, radius 3; transient-global with ``global_block_size``, else
    local), its bias tables (the local one, and the global tokens' one for
    transient-global; 8 buckets up to distance 16, random) and a
    function giving the blocked bias of the right-padded ``padding_mask``."""
    if global_block_size:
        attention = longt5_attention.TransientGlobalSelfAttention(16, 2, head_dim, dropout, 3, 1e-6)
    else:
        attention = longt5_attention.LocalSelfAttention(16, 2, head_dim, dropout, 3)
    tables = [nn.Embedding(8, 2).to(dtype) for _ in range(2 if global_block_size else 1)]

    def bias():
        local, global_table = tables[0], tables[1] if global_block_size else None
        return longt5_attention.blocked_attention_bias(
            padding_mask, dtype, local, global_table, 8, 16, 3, global_block_size
        )

    return attention.to(dtype).train(), tables, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_dropout_draws_what_f_dropout_draws(dtype):
    """The same weights from the same seed, and the generator left where
    ``F.dropout`` leaves it (the draws that follow are the same too)."""
    weights = torch.rand(2, 3, 4, 5, 37, dtype=dtype)
    torch.manual_seed(3)
    expected, expected_next = F.dropout(weights, 0.1, True), torch.rand(4)
    torch.manual_seed(3)
    dropped, following = longt5_attention.attention_dropout(weights, 0.1, True), torch.rand(4)
    assert torch.equal(dropped, expected) and torch.equal(following, expected_next)
    assert (dropped == 0).any() and (dropped != 0).any()
    assert longt5_attention.attention_dropout(weights, 0.1, False) is weights
    assert longt5_attention.attention_dropout(weights, 0.0, True) is weights


@pytest.mark.parametrize("global_block_size", [0, 4])
def test_a_training_step_equals_the_layer_with_f_dropout(monkeypatch, global_block_size):
    """Output and gradients (inputs, projections, both bias tables) of a
    layer with dropout 0.3 in training mode, equal to those of the same
    layer whose weights go through ``F.dropout``, from the same seed
    (float64, a right-padded batch of 23 and 14 tokens, local attention and
    transient-global attention with global blocks of 4)."""
    padding = torch.arange(23)[None, :] >= torch.tensor([23, 14])[:, None]
    attention, tables, bias = attention_and_bias(global_block_size, padding, torch.float64, 4, 0.3)
    x = torch.randn(2, 23, 16, dtype=torch.float64)

    def step():
        torch.manual_seed(11)
        inputs = x.clone().requires_grad_()
        output = attention(inputs, bias())
        parameters = [inputs, *attention.parameters(), *(table.weight for table in tables)]
        gradients = torch.autograd.grad((output * torch.cos(output)).sum(), parameters)
        return output.detach(), gradients

    output, gradients = step()
    monkeypatch.setattr(longt5_attention, "attention_dropout", F.dropout)
    expected_output, expected_gradients = step()
    assert torch.equal(output, expected_output)
    for gradient, expected in zip(gradients, expected_gradients):
        torch.testing.assert_close(gradient, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("global_block_size", [0, 2])
def test_per_score_a_layer_keeps_the_softmax_the_dropped_weights_and_a_boolean_mask(global_block_size):
    """What autograd saves of a layer in training mode with dropout, among
    tensors of as many bytes as its blocked scores ``[B, heads, n, b, 3b +
    G]`` in float32 or in booleans: the softmax's output and the dropped
    weights (float32) and the dropout's boolean mask, no copy of the weights
    for the global tokens' values, no mask in float32 (local attention and
    transient-global attention with ``G = 32``; 64 tokens, radius 3, 2 heads
    of 8, so that no other saved tensor has the scores' size)."""
    padding = torch.zeros(1, 64, dtype=torch.bool)
    attention, _, bias = attention_and_bias(global_block_size, padding, torch.float32, 8, 0.1)
    bias = bias()
    scores = bias.scores.numel()
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    x = torch.randn(1, 64, 16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        attention(x, bias)
    assert sorted(nbytes for nbytes in saved.values() if nbytes in (scores, 4 * scores)) == [
        scores,
        4 * scores,
        4 * scores,
    ]


def test_reading_the_rows_right_padded_keeps_only_the_positions():
    """The component model reads every row right-padded and writes it back
    (:func:`~mdsfair.modules.longt5_components.rows_gathered`): the backward
    pass keeps the positions, not the states, and the gradient reaches the
    states' own positions (float64)."""
    from mdsfair.modules.longt5_components import rows_gathered

    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[2, 3, 4, 0, 1], [0, 1, 2, 3, 4]])
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: saved.append(tensor) or tensor, lambda t: t):
        gathered = rows_gathered(x, positions)
    assert torch.equal(gathered[0], x[0, [2, 3, 4, 0, 1]]) and torch.equal(gathered[1], x[1])
    assert saved and not any(tensor.is_floating_point() for tensor in saved)
    (gradient,) = torch.autograd.grad(gathered, x, torch.arange(30, dtype=torch.float64).view(2, 5, 3))
    assert torch.equal(gradient[0, [2, 3, 4, 0, 1]], torch.arange(15, dtype=torch.float64).view(5, 3))
