"""The component model on T5's backbone and mdsfair's own T5 / LongT5 models
built beside it on one task, with the parameter name map between them, for
``tests/test_t5_backbone.py`` and ``tests/test_longt5_backbone.py``."""

import argparse
import copy

import torch

from mdsfair.models.component_model import ComponentBARTModel
from tests import contract_checks as checks
from tests import model_contract as contract

#: T5 v1.1's choices as flags of the component model, at the tiny T5's
#: buckets (t5_v1_1_tiny: 8 buckets up to distance 16), no dropout; its
#: output layer tied to the embedding (LongT5's) unless
#: ``--untie-output-embedding`` is added (T5 v1.1's)
T5_BACKBONE_FLAGS = (
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

#: T5 v1.1's flags: the backbone and an output layer of its own
T5_FLAGS = T5_BACKBONE_FLAGS + ("--untie-output-embedding",)

#: mdsfair's stack tables (``<stack>.position_bias.*``) -> the component model's, by prefix after the stack
TABLE_NAMES = (
    ("position_bias.global_relative_attention_bias.", "global_relative_position_bias."),
    ("position_bias.", "relative_position_bias."),
)


class T5ShapedComponentModel(ComponentBARTModel):
    """The component model reading T5's decoder start (``<pad>``) and never
    predicting fairseq's ``<s>``, as mdsfair's T5 model does."""

    @classmethod
    def decoder_options(cls, args, dictionary):
        return {"start_index": dictionary.pad(), "absent_index": dictionary.bos()}


def t5_backbone_data(tmp_path_factory, name: str):
    """A tiny multi-document data-bin for the model contract's builders."""
    from tests.utils import make_tiny_data_bin

    work_dir = str(tmp_path_factory.mktemp(name))
    return {
        "data-bin": make_tiny_data_bin(work_dir, train=8, valid=4, test=4, vocab_size=300, **contract.SYNTHETIC_OPTIONS)
    }


def t5_shaped(data, *flags, backbone=T5_FLAGS):
    """``multidoc_bart_tiny`` with T5's ``backbone`` (and ``flags``), its
    embedding without a layer norm (T5 has none; BART's architecture fills
    one, and fairseq has no flag that removes it)."""
    from fairseq import utils

    built = contract.ContractModel("multidoc_bart_tiny", data, *backbone, *flags)
    built.cfg.model.layernorm_embedding = False
    utils.set_torch_seed(1)
    return built, T5ShapedComponentModel.build_model(built.cfg.model, built.task)


def mdsfair_t5(task, arch: str = "t5_v1_1_tiny"):
    """mdsfair's T5 or LongT5 architecture ``arch`` (mdsfair/models/t5.py) on ``task``'s dictionary."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    args = argparse.Namespace(arch=arch)
    ARCH_CONFIG_REGISTRY[arch](args)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


def component_name(t5_name: str) -> str:
    """The component model's name of a parameter of mdsfair's T5: the
    feed-forward's linears sit in the layer (fairseq's ``fc1``/``fc2``, plus
    ``fc_gate``), the stacks' bias tables are ``relative_position_bias`` and
    LongT5's global one ``global_relative_position_bias`` (:data:`TABLE_NAMES`)."""
    name = t5_name.replace(".ffn.", ".")
    stack, _, rest = name.partition(".")
    for t5_table, table in TABLE_NAMES:
        if rest.startswith(t5_table):
            return f"{stack}.{table}{rest[len(t5_table) :]}"
    return name


def load_t5_weights(component, t5) -> None:
    """``t5``'s parameters into ``component`` by :func:`component_name`, with
    the component model's own ``version`` entries (fairseq drops the final
    layer norm of a stack whose checkpoint has none: pre-2 checkpoints had no
    such norm); nothing else of ``component`` is left out."""
    mapped = {component_name(name): value for name, value in t5.state_dict().items()}
    mapped.update({name: value for name, value in component.state_dict().items() if name.endswith(".version")})
    component.load_state_dict(mapped, strict=True)


def assert_same_teacher_forced_logits(built, sample, reference, component):
    """``component``'s teacher-forced logits on ``sample`` are ``reference``'s
    (float64 models, the tolerance of :func:`contract_checks.close_in_model_dtype`:
    fairseq's cross-attention takes its softmax in float32), and a 0.1 %
    change of them is not; the batch is padded. Returns ``reference``'s
    logits and the mask of the real target tokens."""
    net_input = sample["net_input"]
    assert net_input["src_tokens"].eq(built.task.source_dictionary.pad()).any()  # the batch is padded
    with torch.no_grad():
        expected, _ = reference(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])
        actual, _ = component(**net_input)
    real = sample["target"].ne(built.task.target_dictionary.pad())
    assert checks.close_in_model_dtype(actual[real], expected[real])
    assert not checks.close_in_model_dtype(actual[real], expected[real] * 1.001)
    return expected, real


def assert_same_hypotheses(built, sample, reference, component):
    """``component``'s greedy and beam-3 hypotheses on ``sample`` are
    ``reference``'s, under the task's static-shape generator (whose fast
    decoder modules fall back to the reference under a per-head mask) and
    fairseq's, and some hypothesis is more than a lone ``</s>``."""
    for beam, fairseq_generator in ((1, False), (3, False), (3, True)):
        built.task.cfg.fairseq_generator = fairseq_generator
        gen_cfg = copy.deepcopy(built.cfg.generation)
        gen_cfg.beam, gen_cfg.max_len_b, gen_cfg.min_len, gen_cfg.max_len_a = beam, 8, 1, 0
        hypotheses = {}
        for name, model in (("reference", reference), ("component", component)):
            with torch.no_grad():
                generator = built.task.build_generator([model], gen_cfg)
                found = built.task.inference_step(generator, [model], sample)
            hypotheses[name] = [[h["tokens"].tolist() for h in row] for row in found]
        assert hypotheses["component"] == hypotheses["reference"], (beam, fairseq_generator)
        assert any(len(tokens) > 2 for row in hypotheses["reference"] for tokens in row)


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
