"""T5 v1.1 as a backbone of the component model (issue 44, "Backbone
components"): the backbone flags (``--normalization rmsnorm``,
``--feed-forward gated-gelu``, ``--linear-biases off``, ``--attention-scaling
none``, ``--untie-output-embedding``) and ``--encoder-positions
t5-relative-bias`` make the component model compute what mdsfair's T5 model
(``mdsfair/models/t5.py``, equal to Hugging Face's, ``tests/test_t5.py``)
computes, on its weights renamed; HierEncDec's document attention and
document-scaled cross-attention then run on it."""

import argparse
import copy

import pytest
import torch
from fairseq.modules import MultiheadAttention

from mdsfair.models.component_model import ComponentBARTModel
from tests import contract_checks as checks
from tests import model_contract as contract
from tests.tolerances import assert_close_in_dtype

#: T5 v1.1's choices as flags of the component model, at the tiny T5's
#: buckets (t5_v1_1_tiny: 8 buckets up to distance 16), no dropout
T5_FLAGS = (
    "--encoder-positions",
    "t5-relative-bias",
    "--relative-attention-num-buckets",
    "8",
    "--relative-attention-max-distance",
    "16",
    "--normalization",
    "rmsnorm",
    "--feed-forward",
    "gated-gelu",
    "--linear-biases",
    "off",
    "--attention-scaling",
    "none",
    "--untie-output-embedding",
    "--no-scale-embedding",
    "--encoder-normalize-before",
    "--decoder-normalize-before",
    "--dropout",
    "0",
    "--attention-dropout",
    "0",
    "--activation-dropout",
    "0",
)


class T5ShapedComponentModel(ComponentBARTModel):
    """The component model reading T5's decoder start (``<pad>``) and never
    predicting fairseq's ``<s>``, as mdsfair's T5 model does."""

    @classmethod
    def decoder_options(cls, args, dictionary):
        return {"start_index": dictionary.pad(), "absent_index": dictionary.bos()}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from tests.utils import make_tiny_data_bin

    work_dir = str(tmp_path_factory.mktemp("t5_backbone"))
    return {
        "data-bin": make_tiny_data_bin(work_dir, train=8, valid=4, test=4, vocab_size=300, **contract.SYNTHETIC_OPTIONS)
    }


def t5_shaped(data, *flags):
    """``multidoc_bart_tiny`` with T5's backbone (and ``flags``), its embedding
    without a layer norm (T5 has none; BART's architecture fills one, and
    fairseq has no flag that removes it)."""
    from fairseq import utils

    built = contract.ContractModel("multidoc_bart_tiny", data, *T5_FLAGS, *flags)
    built.cfg.model.layernorm_embedding = False
    utils.set_torch_seed(1)
    return built, T5ShapedComponentModel.build_model(built.cfg.model, built.task)


def mdsfair_t5(task):
    """``t5_v1_1_tiny`` (mdsfair/models/t5.py) on ``task``'s dictionary."""
    from mdsfair.models.t5 import T5Model, t5_v1_1_tiny_architecture

    args = argparse.Namespace(arch="t5_v1_1_tiny")
    t5_v1_1_tiny_architecture(args)
    return T5Model.build_model(args, task)


def component_name(t5_name: str) -> str:
    """The component model's name of a parameter of mdsfair's T5: the
    feed-forward's linears sit in the layer (fairseq's ``fc1``/``fc2``, plus
    ``fc_gate``), the stacks' bias tables are ``relative_position_bias``."""
    return t5_name.replace(".ffn.", ".").replace("position_bias.", "relative_position_bias.")


def load_t5_weights(component, t5) -> None:
    """``t5``'s parameters into ``component`` by :func:`component_name`, with
    the component model's own ``version`` entries (fairseq drops the final
    layer norm of a stack whose checkpoint has none: pre-2 checkpoints had no
    such norm); nothing else of ``component`` is left out."""
    mapped = {component_name(name): value for name, value in t5.state_dict().items()}
    mapped.update({name: value for name, value in component.state_dict().items() if name.endswith(".version")})
    component.load_state_dict(mapped, strict=True)


def test_bart_keeps_its_backbone_and_the_flags_say_t5s():
    from mdsfair.modules.components import BackboneConfig

    assert BackboneConfig.of(argparse.Namespace()).is_barts  # a checkpoint without the flags is BART's
    t5 = BackboneConfig.of(argparse.Namespace(normalization="rmsnorm", linear_biases="off", attention_scaling="none"))
    assert not t5.is_barts and not t5.linear_bias and t5.feed_forward == "fairseq" and t5.rms_norm_eps == 1e-6


@pytest.mark.parametrize("incremental", [False, True])
def test_biased_self_attention_is_fairseqs_computation(incremental):
    """On BART's backbone and one ``[T, S]`` mask it computes fairseq's
    attention (float32 both: fairseq's softmax is float32), full and step by
    step with fairseq's cache; a mask per head is a different mask per head."""
    from mdsfair.modules.biased_self_attention import biased_self_attention

    torch.manual_seed(0)
    attention = MultiheadAttention(16, 4, self_attention=True).eval()
    x = torch.randn(5, 2, 16)
    future = torch.triu(torch.full((5, 5), float("-inf")), 1)
    with torch.no_grad():
        expected, _ = attention(x, x, x, attn_mask=future, need_weights=False)
        if incremental:
            state, steps = {}, []
            for step in range(5):
                out, _ = biased_self_attention(attention, x[step : step + 1], incremental_state=state)
                steps.append(out)
            actual = torch.cat(steps)
        else:
            actual, _ = biased_self_attention(attention, x, attn_mask=future)
    assert_close_in_dtype(actual, expected)  # float32, two computations: tolerance from the dtype
    per_head = future.expand(2 * 4, 5, 5).clone()
    per_head[1::4] = 0.0  # head 1 of every row sees the future
    with torch.no_grad():
        mixed, _ = biased_self_attention(attention, x, attn_mask=per_head)
    assert not torch.allclose(mixed, expected)


def test_t5_shaped_component_model_equals_mdsfairs_t5_in_float64(data):
    """The proof: T5 v1.1's choices on the component model, with the weights
    of mdsfair's T5 copied by name, give its teacher-forced logits (a padded
    batch of three) and its greedy and beam hypotheses (the task's
    static-shape generator, whose fast decoder modules fall back to the
    reference under a per-head mask, and fairseq's)."""
    built, component = t5_shaped(data)
    t5 = mdsfair_t5(built.task)
    checks.perturb_parameters(t5, seed=3, scale=0.1)
    load_t5_weights(component, t5)
    component, t5 = component.double().eval(), t5.double().eval()
    assert type(component.encoder.layers[0].final_layer_norm).__name__ == "T5LayerNorm"
    assert component.encoder.embed_positions is None and component.decoder.embed_positions is None
    assert component.decoder.output_projection.weight is not component.decoder.embed_tokens.weight

    sample = built.batch("valid", [0, 1, 2], component)
    net_input = sample["net_input"]
    assert net_input["src_tokens"].eq(built.task.source_dictionary.pad()).any()  # the batch is padded
    with torch.no_grad():
        expected, _ = t5(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])
        actual, _ = component(**net_input)
    real = sample["target"].ne(built.task.target_dictionary.pad())
    # float64 models; fairseq's cross-attention takes its softmax in float32 (contract_checks.close_in_model_dtype)
    assert checks.close_in_model_dtype(actual[real], expected[real])
    assert not checks.close_in_model_dtype(actual[real], expected[real] * 1.001)

    for beam, fairseq_generator in ((1, False), (3, False), (3, True)):  # the static-shape generator, fairseq's
        built.task.cfg.fairseq_generator = fairseq_generator
        gen_cfg = copy.deepcopy(built.cfg.generation)
        gen_cfg.beam, gen_cfg.max_len_b, gen_cfg.min_len, gen_cfg.max_len_a = beam, 8, 1, 0
        hypotheses = {}
        for name, model in (("t5", t5), ("component", component)):
            with torch.no_grad():
                generator = built.task.build_generator([model], gen_cfg)
                found = built.task.inference_step(generator, [model], sample)
            hypotheses[name] = [[h["tokens"].tolist() for h in row] for row in found]
        assert hypotheses["component"] == hypotheses["t5"], beam
        assert any(len(tokens) > 2 for row in hypotheses["t5"] for tokens in row)  # more than a lone </s>


def test_the_seeds_methods_run_on_the_t5_backbone(data):
    """HierEncDec's document attention (the relative bias over the document
    rule) and document-scaled cross-attention (Eq. 3-5) on T5's backbone:
    incremental beam search gives the full forward's scores (the model
    contract's check), padding and batch composition change no example's
    output, a training step's loss is finite and falls."""
    from fairseq.trainer import Trainer

    built, model = t5_shaped(data, "--encoder-self-attention", "document", "--cross-attention", "document-scaled")
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert model.encoder.self_attention_component.name == "document"
    assert model.encoder.layers[0].self_attn.q_proj.bias is None and model.encoder.layers[0].self_attn.scaling == 1.0
    checks.check_incremental_beam_search_equals_full_decoding(built, model)
    checks.check_forward_shapes_padding_and_batch_composition(built, model)

    model.train()
    trainer = Trainer(built.cfg, built.task, model, built.build_criterion())
    train = built.batch("train", [0, 1, 2, 3], model)
    losses = [trainer.train_step([train])["loss"] for _ in range(4)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses


def test_document_attention_with_the_bias_is_full_attention_within_one_document(data):
    """The relative bias enters the document rule as it enters full
    attention: on sources of one document each, ``document`` computes what
    ``full`` computes (same weights, float64)."""
    _, full = t5_shaped(data)
    built, document = t5_shaped(data, "--encoder-self-attention", "document")
    document.load_state_dict(full.state_dict())
    full, document = full.double().eval(), document.double().eval()
    bos, pad = built.task.source_dictionary.bos(), built.task.source_dictionary.pad()
    tokens = torch.tensor([[bos, 10, 11, 12, 13, 2], [pad, pad, bos, 20, 21, 2]])
    with torch.no_grad():
        expected = full.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
        actual = document.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
    torch.testing.assert_close(actual[:, 0], expected[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(actual[2:, 1], expected[2:, 1], rtol=1e-12, atol=1e-12)


def test_components_that_cannot_run_on_t5s_backbone_are_refused(data):
    """A self-attention that takes no bias per head under the relative bias;
    a component that builds BART's attention on T5's backbone."""
    with pytest.raises(ValueError, match="takes no bias per head"):
        contract.ContractModel(
            "multidoc_bart_tiny",
            data,
            "--encoder-positions",
            "t5-relative-bias",
            "--encoder-self-attention",
            "longformer",
        ).build_model()
    with pytest.raises(ValueError, match="--cross-attention hepos builds BART's attention"):
        t5_shaped(data, "--cross-attention", "hepos")
