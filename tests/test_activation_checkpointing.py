"""fairseq's activation checkpointing, what mdsfair relies on and what it works
around (:mod:`mdsfair.modules.activation_checkpointing`); every architecture's
layers are checked in the model-contract suite."""

from argparse import Namespace
from typing import NamedTuple

import torch
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import nn

from mdsfair.modules.activation_checkpointing import (
    activation_checkpointing,
    checkpoint_layer,
    checkpoint_structured_layer,
    checkpointed_modules,
)

ON = Namespace(checkpoint_activations=True, offload_activations=False)
OFFLOAD = Namespace(checkpoint_activations=False, offload_activations=True)
OFF = Namespace(checkpoint_activations=False, offload_activations=False)


class Context(NamedTuple):
    states: torch.Tensor
    scale: float


class Report(NamedTuple):
    hidden: torch.Tensor
    saliency: torch.Tensor


class StructuredLayer(nn.Module):
    """Reads a tensor inside a NamedTuple and returns one inside another."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, context: Context, keyword=None):
        hidden = torch.tanh(self.linear(x)) * context.scale + context.states.sum()
        return hidden, Report(hidden, (hidden * context.states.mean()).sum(-1))


class AttributeLayer(nn.Module):
    """Reads a value its caller sets as an attribute for one pass."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.bias_from_caller = None

    def forward(self, x):
        return torch.tanh(self.linear(x) + (0.0 if self.bias_from_caller is None else self.bias_from_caller))


def losses_and_gradients(layer, inputs, call):
    layer.zero_grad(set_to_none=True)
    for tensor in inputs:
        tensor.grad = None
    loss = call(layer)
    loss.backward()
    parameter_grads = [p.grad.clone() for p in layer.parameters()]
    return loss.detach(), parameter_grads, [t.grad.clone() for t in inputs if t.requires_grad]


def test_flags():
    assert activation_checkpointing(ON) and activation_checkpointing(OFFLOAD) and not activation_checkpointing(OFF)
    layer = nn.Linear(2, 2)
    assert checkpoint_layer(layer, OFF) is layer and not checkpointed_modules(layer)
    assert checkpointed_modules(nn.Sequential(checkpoint_layer(nn.Linear(2, 2), ON))) == ["0"]


def test_fairseq_wrapper_loses_tensors_inside_structures_and_the_structured_wrapper_keeps_them():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    states = torch.randn(5, requires_grad=True)

    def call(layer):
        hidden, report = layer(x, Context(states, 0.5), keyword="k")
        return hidden.sum() + report.saliency.pow(2).sum()

    reference = StructuredLayer()
    expected = losses_and_gradients(reference, [x, states], call)
    for wrap, keeps in ((lambda m: checkpoint_wrapper(m), False), (lambda m: checkpoint_structured_layer(m, ON), True)):
        layer = StructuredLayer()
        layer.load_state_dict(reference.state_dict())
        layer = wrap(layer)
        hidden, report = layer(x, Context(states, 0.5), keyword="k")
        # fairseq's function returns the NamedTuple as computed without grad
        assert report.saliency.requires_grad == keeps
        if keeps:
            loss, parameter_grads, input_grads = losses_and_gradients(layer, [x, states], call)
            assert torch.equal(loss, expected[0])
            for got, want in zip(parameter_grads + input_grads, expected[1] + expected[2]):
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_trainable_layer_on_frozen_inputs_gets_gradients():
    """fairseq's function gives an output without grad when no tensor input
    requires grad, so the layer's own parameters would not train."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)  # frozen input
    reference = nn.Linear(4, 4)
    reference(x).pow(2).sum().backward()
    fairseq_wrapped = checkpoint_wrapper(nn.Linear(4, 4))
    assert not fairseq_wrapped(x).requires_grad
    ours = nn.Linear(4, 4)
    ours.load_state_dict(reference.state_dict())
    ours = checkpoint_layer(ours, ON)
    ours(x).pow(2).sum().backward()
    torch.testing.assert_close(ours.weight.grad, reference.weight.grad)


def test_attribute_inputs_are_set_again_for_the_recomputation():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    bias = torch.randn(4)

    def call(layer):
        layer.bias_from_caller = bias  # the caller sets it for one pass ...
        out = layer(x)
        layer.bias_from_caller = None  # ... and resets it before the backward pass
        return out.pow(2).sum()

    reference = AttributeLayer()
    expected = losses_and_gradients(reference, [x], call)
    forgetful = checkpoint_layer(AttributeLayer(), ON)
    forgetful.load_state_dict(reference.state_dict())
    assert not torch.allclose(losses_and_gradients(forgetful, [x], call)[1][0], expected[1][0])
    layer = AttributeLayer()
    layer.load_state_dict(reference.state_dict())
    layer = checkpoint_layer(layer, OFFLOAD, attribute_inputs=[(layer, "bias_from_caller")])
    loss, parameter_grads, input_grads = losses_and_gradients(layer, [x], call)
    assert torch.equal(loss, expected[0]) and layer.bias_from_caller is None
    for got, want in zip(parameter_grads + input_grads, expected[1] + expected[2]):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_without_gradients_the_layer_runs_as_is_and_dicts_pass_by_reference():
    class Incremental(nn.Module):
        def forward(self, x, incremental_state=None):
            incremental_state["steps"] = incremental_state.get("steps", 0) + 1
            return x * 2, Report(x, x)

    layer = checkpoint_structured_layer(Incremental(), ON)
    state = {}
    with torch.no_grad():
        layer(torch.ones(2), incremental_state=state)
    layer(torch.ones(2, requires_grad=True), incremental_state=state)
    assert state == {"steps": 2}
