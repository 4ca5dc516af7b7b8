"""LongT5 as the component model (issue 44): the registered ``longt5``
architectures are the component model on T5's backbone with
``--encoder-self-attention local`` or ``transient-global``
(:mod:`mdsfair.modules.longt5_components`; equal to Hugging Face's on
imported weights: ``tests/test_longt5.py``); the encoder computes no dense
bias for them; document-scaled cross-attention runs on it; a checkpoint of
the former LongT5 model has its global table renamed as it loads."""

import pytest
import torch

from tests import contract_checks as checks
from tests.t5_family_checks import assert_contract_and_training, t5_backbone_data, t5_family


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return t5_backbone_data(tmp_path_factory, "longt5_backbone")


def test_the_blocked_attention_reads_no_dense_bias_and_the_global_table_is_the_encoders(data):
    """The encoder computes no ``[B * H, T, T]`` bias for LongT5's attention;
    the global tokens' table is the encoder's, the local one the position
    component's."""
    built, model = t5_family(data, "longt5_tiny")
    names = dict(model.named_parameters())
    assert "encoder.global_relative_position_bias.weight" in names
    assert "encoder.relative_position_bias.relative_attention_bias.weight" in names
    assert "encoder.layers.0.self_attn.global_input_layer_norm.weight" in names
    calls = []
    position = model.encoder.position_component
    original = position.attention_bias
    position.attention_bias = lambda *args: calls.append(args) or original(*args)
    sample = built.batch("valid", [0, 1], model)
    with torch.no_grad():
        model.eval()(**sample["net_input"])
    assert not calls


def test_document_scaled_cross_attention_runs_on_longt5(data):
    """HierEncDec's document-scaled cross-attention (Eq. 3-5) over LongT5's
    transient-global encoder: incremental beam search gives the full
    forward's scores, padding and batch composition change no example's
    output, a training step's loss is finite and falls."""
    built, model = t5_family(data, "longt5_tiny", "--cross-attention", "document-scaled")
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert model.encoder.self_attention_component.name == "transient-global"
    assert_contract_and_training(built, model)


@pytest.mark.parametrize("attention", ["local", "transient-global"])
def test_longt5_attention_is_refused_on_barts_backbone(data, attention):
    """LongT5's attention is T5's: refused with BART's positions, and on
    BART's biased, scaled attention."""
    from tests import model_contract as contract

    with pytest.raises(ValueError, match="it needs --encoder-positions t5-relative-bias"):
        contract.ContractModel("multidoc_bart_tiny", data, "--encoder-self-attention", attention).build_model()
    with pytest.raises(ValueError, match="it needs T5's backbone: --linear-biases off --attention-scaling none"):
        contract.ContractModel(
            "multidoc_bart_tiny", data, "--encoder-positions", "t5-relative-bias", "--encoder-self-attention", attention
        ).build_model()


def test_the_encoders_gradients_under_activation_checkpointing(data):
    """The blocked bias, a function of the trainable tables, reaches every
    checkpointed encoder layer as a recorded input: the tables' and the
    layers' gradients under ``--checkpoint-activations`` are those without
    (float64, one computation recomputed: equal to rounding)."""
    gradients = []
    for extra in ((), ("--checkpoint-activations",)):
        built, model = t5_family(data, "longt5_tiny", *extra)
        model = model.double().train()
        net_input = built.batch("train", [0, 1], model)["net_input"]
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        encoder_out["encoder_out"][0].pow(2).sum().backward()
        gradients.append({name: p.grad for name, p in model.encoder.named_parameters() if p.grad is not None})
    without, checkpointed = gradients
    assert "relative_position_bias.relative_attention_bias.weight" in without
    assert "global_relative_position_bias.weight" in without
    assert checkpointed.keys() == without.keys()
    for name, gradient in without.items():
        torch.testing.assert_close(checkpointed[name], gradient, rtol=1e-12, atol=1e-12, msg=name)


def test_the_former_longt5_models_names_are_renamed_as_it_loads(data):
    """The former model's names (its feed-forward in ``ffn``, the stacks'
    tables in ``position_bias``, the global table inside the encoder's):
    renamed to this model's, with the stacks' versions, when loaded."""
    from mdsfair.models.t5_family import former_t5_parameter_name

    _built, model = t5_family(data, "longt5_tiny")
    expected = model.state_dict()
    former = {
        "encoder.position_bias.global_relative_attention_bias.weight": "encoder.global_relative_position_bias.weight",
        "encoder.position_bias.relative_attention_bias.weight": "encoder.relative_position_bias.relative_attention_bias.weight",
        "decoder.layers.1.ffn.fc_gate.weight": "decoder.layers.1.fc_gate.weight",
        "encoder.layers.0.self_attn.global_input_layer_norm.weight": "encoder.layers.0.self_attn.global_input_layer_norm.weight",
    }
    for name, renamed in former.items():
        assert former_t5_parameter_name(name) == renamed
    state = {name: value.clone() for name, value in expected.items() if not name.endswith(".version")}
    for name, renamed in former.items():
        state[name] = state.pop(renamed)
    model.upgrade_state_dict_named(state, "")
    assert state.keys() == expected.keys()
    model.load_state_dict(state)
