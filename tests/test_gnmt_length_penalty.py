"""``--length-penalty-form gnmt``: GNMT's length penalty ``((5 + len) / 6)^alpha``
(Wu et al. 2016, section 7; the Hierarchical Transformer's decoding, alpha
0.4) with ``--lenpen`` as alpha, in both generators
(:mod:`mdsfair.generation.length_penalty`), on the float64 golden
checkpoint of ``hiertransformer_tiny`` (``tests/golden_outputs.py``)."""

import os
import re
from argparse import Namespace

import pytest
import torch
from omegaconf import open_dict

from mdsfair.generation.length_penalty import (
    LENGTH_PENALTY_FORMS,
    LengthPenaltySequenceGenerator,
    length_penalty,
)
from mdsfair.generation.sequence_generator import GenerationSettingsError
from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator
from tests import golden_outputs as golden

ARCH = "hiertransformer_tiny"
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: fairseq's get_normalized_probs casts every step's log-probabilities to float32 whatever the model's
#: dtype (tests/test_static_decoding.py): scores agree to a few units of float32 round-off at their scale
SCORE_TOLERANCE = 64 * torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- the function


@pytest.mark.parametrize(
    "length, alpha, form, expected",
    [
        (1, 0.4, "gnmt", 1.0),  # (5 + 1) / 6 = 1: a one-token hypothesis is never rescaled
        (7, 0.5, "gnmt", 2.0**0.5),  # (5 + 7) / 6 = 2
        (19, 1.0, "gnmt", 4.0),  # (5 + 19) / 6 = 4
        (25, 2.0, "gnmt", 25.0),  # ((5 + 25) / 6)^2 = 5^2
        (4, 2.0, "fairseq", 16.0),
        (9, 0.5, "fairseq", 3.0),
        (10, 0.0, "gnmt", 1.0),  # alpha 0: no penalty in either form
        (10, 0.0, "fairseq", 1.0),
    ],
)
def test_length_penalty_against_hand_worked_values(length, alpha, form, expected):
    assert length_penalty(length, alpha, form) == pytest.approx(expected, rel=4 * torch.finfo(torch.float64).eps)


def test_length_penalty_of_a_tensor_is_that_of_each_length():
    lengths = torch.tensor([1, 7, 19, 25])
    assert length_penalty(lengths, 1.0, "gnmt").tolist() == [1.0, 2.0, 4.0, 5.0]
    assert length_penalty(lengths.double(), 2.0, "fairseq").tolist() == [1.0, 49.0, 361.0, 625.0]
    with pytest.raises(ValueError, match="--length-penalty-form must be one of fairseq, gnmt"):
        length_penalty(lengths, 1.0, "wu")


def test_the_forms_rank_two_hypotheses_differently():
    """A short and a long hypothesis, log-probabilities -1 (2 tokens) and -3
    (10 tokens), alpha 1: fairseq's form divides by 2 and 10 (-0.5, -0.3:
    the long one wins), GNMT's by 7/6 and 15/6 (-0.857, -1.2: the short one)."""
    fairseq_scores = [-1.0 / length_penalty(2, 1.0, "fairseq"), -3.0 / length_penalty(10, 1.0, "fairseq")]
    gnmt_scores = [-1.0 / length_penalty(2, 1.0, "gnmt"), -3.0 / length_penalty(10, 1.0, "gnmt")]
    assert fairseq_scores[1] > fairseq_scores[0] and gnmt_scores[0] > gnmt_scores[1]


# ------------------------------------------------------------- the generators


@pytest.fixture(scope="module")
def golden_model():
    return golden.load(ARCH)


#: added to the logit of </s> at every step: the golden model, which never ends a summary before its length
#: limit, then finishes hypotheses of 2 to 4 tokens, whose ranking the penalty's form decides
EOS_LOGIT_BIAS = 8.0
#: the search settings of those tests: no minimum length, a limit of 12 tokens
STOPPING = {"min_len": 1, "max_len_b": 12}


@pytest.fixture
def stopping_model(golden_model):
    """The golden model with :data:`EOS_LOGIT_BIAS` on ``</s>`` in every
    decoder pass (beam search and full forward alike)."""
    model, _, task = golden_model
    eos = task.target_dictionary.eos()
    forward = model.decoder.forward

    def biased(*args, **kwargs):
        logits, *rest = forward(*args, **kwargs)
        logits = logits.clone()
        logits[..., eos] += EOS_LOGIT_BIAS
        return (logits, *rest)

    model.decoder.forward = biased
    try:
        yield golden_model
    finally:
        del model.decoder.forward


def golden_sample():
    return torch.load(os.path.join(golden.GOLDEN_DIR, ARCH, "batch.pt"), weights_only=True)


def generate(golden_model, static: bool, form: str, **settings):
    """The n-best lists of the golden sample, with ``form`` given as the
    generation config's ``length_penalty_form`` (as ``--eval-rouge-args``
    and the hub give it)."""
    model, cfg, task = golden_model
    generation = golden.generation_config(cfg)
    with open_dict(generation):
        generation.length_penalty_form = form
        for name, value in settings.items():
            setattr(generation, name, value)
    task.cfg.static_decoding, task.cfg.fairseq_generator = static, not static
    try:
        generator = task.build_generator([model], generation)
    finally:
        task.cfg.static_decoding, task.cfg.fairseq_generator = False, False
    assert isinstance(generator, StaticShapeSequenceGenerator) == static
    assert isinstance(generator, LengthPenaltySequenceGenerator) == (static or form != "fairseq")
    with torch.no_grad():
        return task.inference_step(generator, [model], golden_sample())


def assert_same_n_best(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert [h["tokens"].tolist() for h in mine] == [h["tokens"].tolist() for h in reference]
        for hypothesis, expected in zip(mine, reference):
            scale = max(1.0, expected["positional_scores"].abs().max().item())
            torch.testing.assert_close(
                hypothesis["positional_scores"], expected["positional_scores"], atol=SCORE_TOLERANCE * scale, rtol=0
            )
            torch.testing.assert_close(hypothesis["score"], expected["score"], atol=SCORE_TOLERANCE * scale, rtol=0)


@pytest.mark.parametrize("lenpen", [0.4, 1.0])
def test_both_generators_give_the_same_n_best_with_the_gnmt_form(stopping_model, lenpen):
    static = generate(stopping_model, static=True, form="gnmt", lenpen=lenpen, **STOPPING)
    assert_same_n_best(static, generate(stopping_model, static=False, form="gnmt", lenpen=lenpen, **STOPPING))
    assert len({len(hypothesis["tokens"]) for hypotheses in static for hypothesis in hypotheses}) > 1
    assert all(len(hypotheses) == golden.GENERATION["beam"] for hypotheses in static)


def key(hypothesis):
    return tuple(hypothesis["tokens"].tolist())


def test_the_forms_finalize_the_same_hypotheses_and_rank_them_by_their_own_penalty(stopping_model):
    """The penalty changes no step of the search, only the finished
    hypotheses' scores: each form's n-best holds the same hypotheses, each
    scored sum(log-probabilities) / lp(len) of its form; and for some alpha
    the best summary of a cluster is another one (so this test can fail)."""
    best_differs = []
    for lenpen in (-2.0, 0.4, 1.0, 4.0):
        by_form = {
            form: generate(stopping_model, static=True, form=form, lenpen=lenpen, **STOPPING)
            for form in LENGTH_PENALTY_FORMS
        }
        for fairseq_list, gnmt_list in zip(by_form["fairseq"], by_form["gnmt"]):
            assert sorted(map(key, fairseq_list)) == sorted(map(key, gnmt_list))
            for form, hypotheses in (("fairseq", fairseq_list), ("gnmt", gnmt_list)):
                for hypothesis in hypotheses:
                    length = len(hypothesis["tokens"])
                    expected = hypothesis["positional_scores"].sum().item() / length_penalty(length, lenpen, form)
                    assert hypothesis["score"].item() == pytest.approx(expected, abs=SCORE_TOLERANCE * length)
            best_differs.append(key(fairseq_list[0]) != key(gnmt_list[0]))
    assert any(best_differs)


def teacher_forced_log_probability(golden_model, source_index: int, tokens: torch.Tensor) -> float:
    """log P(tokens | source) by one full forward pass of the float64 model
    (no beam search): the sum of the tokens' log-probabilities."""
    model, _, task = golden_model
    sample = golden_sample()
    eos = task.target_dictionary.eos()
    one = {
        **sample,
        "id": sample["id"][source_index : source_index + 1],
        "net_input": {
            name: value[source_index : source_index + 1] if torch.is_tensor(value) and value.dim() > 0 else value
            for name, value in sample["net_input"].items()
        },
    }
    one["net_input"]["prev_output_tokens"] = torch.cat([torch.tensor([eos]), tokens[:-1]]).unsqueeze(0)
    one["target"] = tokens.unsqueeze(0)
    lprobs = golden.teacher_forced_lprobs(task, model, one)[0]
    return lprobs.gather(1, tokens.unsqueeze(1)).sum().item()


@pytest.mark.parametrize("static", [True, False])
def test_the_ranking_is_that_of_brute_force_scoring_every_finished_hypothesis(stopping_model, static):
    """An oracle: every finished hypothesis of the beam search (the whole
    n-best list, beam 3) rescored by a full forward pass and divided by
    ((5 + len) / 6)^0.4 written out here; the generator's order and scores
    are the oracle's."""
    alpha = 0.4
    for source_index, hypotheses in enumerate(
        generate(stopping_model, static=static, form="gnmt", lenpen=alpha, **STOPPING)
    ):
        oracle = []
        for hypothesis in hypotheses:
            tokens = hypothesis["tokens"]
            log_probability = teacher_forced_log_probability(stopping_model, source_index, tokens)
            oracle.append(log_probability / ((5 + len(tokens)) / 6) ** alpha)
            tolerance = SCORE_TOLERANCE * len(tokens) * max(1.0, abs(log_probability))
            assert hypothesis["score"].item() == pytest.approx(oracle[-1], abs=tolerance)
        assert oracle == sorted(oracle, reverse=True)
        assert len(set(oracle)) == len(oracle)  # distinct scores: the order is not a tie's


# ------------------------------------------------------------ the option


def test_the_task_flag_and_the_generation_option_choose_the_form(golden_model):
    from fairseq.sequence_generator import SequenceGenerator

    model, cfg, task = golden_model
    generation = golden.generation_config(cfg)
    task.cfg.fairseq_generator = True
    try:
        assert type(task.build_generator([model], generation)) is SequenceGenerator  # fairseq's form: fairseq's own
        with open_dict(task.cfg):
            task.cfg.length_penalty_form = "gnmt"
        generator = task.build_generator([model], generation)
        assert type(generator) is LengthPenaltySequenceGenerator and generator.length_penalty_form == "gnmt"
        # the generation config's own value (--eval-rouge-args, the hub) wins over the task flag
        override = Namespace(**{**dict(generation), "length_penalty_form": "fairseq"})
        assert type(task.build_generator([model], override)) is SequenceGenerator
        with pytest.raises(GenerationSettingsError, match="--print-alignment"):
            task.build_generator([model], Namespace(**{**dict(generation), "print_alignment": "hard"}))
        with pytest.raises(GenerationSettingsError, match="must be one of fairseq, gnmt"):
            task.build_generator([model], Namespace(**{**dict(generation), "length_penalty_form": "wu"}))
    finally:
        task.cfg.fairseq_generator = False
        with open_dict(task.cfg):
            task.cfg.length_penalty_form = "fairseq"


def test_fairseq_generate_parses_the_flag():
    from fairseq import options

    import mdsfair

    mdsfair.register()
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(
        parser,
        [golden.GOLDEN_DIR, "--task", "multidoc_summarization", "--length-penalty-form", "gnmt", "--lenpen", "0.4"],
    )
    assert args.length_penalty_form == "gnmt" and args.lenpen == 0.4
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(
            parser, [golden.GOLDEN_DIR, "--task", "multidoc_summarization", "--length-penalty-form", "wu"]
        )


# ------------------------------------------------------- the authors' code


def test_hiersumm_predictor_divides_by_5_plus_step_plus_1_over_6_to_the_alpha_with_alpha_0_4():
    """nlpyang/hiersumm, src/abstractive/predictor_builder.py,
    _fast_translate_batch: at step ``step`` (from 0) the cumulative
    log-probabilities are divided by ``((5.0 + (step + 1)) / 6.0) ** alpha``,
    alpha 0.4 in their README's evaluation (with beam 5, minimum length 20,
    maximum length 400). A hypothesis whose ``</s>`` comes
    at step ``step`` has ``step + 1`` tokens with it: the same number, and the
    HT recipe's generate command asks for exactly these settings."""
    alpha = 0.4
    for step in range(400):
        assert length_penalty(step + 1, alpha, "gnmt") == ((5.0 + (step + 1)) / 6.0) ** alpha
    with open(os.path.join(REPOSITORY, "examples", "hiertransformer", "README.md"), encoding="utf-8") as readme:
        text = readme.read()
    commands = re.findall(r"fairseq-generate data-bin\S* .*?> gen\.log", text, flags=re.S)
    gnmt = [" ".join(command.replace("\\\n", " ").split()) for command in commands if "gnmt" in command]
    assert gnmt, "the HT recipe has no generate command with --length-penalty-form gnmt"
    for command in gnmt:
        for setting in ("--length-penalty-form gnmt", "--lenpen 0.4", "--beam 5", "--min-len 20", "--max-len-b 400"):
            assert setting in command, f"{setting} missing from the HT recipe's command: {command}"


def test_the_hubs_generation_config_takes_the_option_by_name():
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf

    from mdsfair.hub_interface import MultiDocSummarizationHubInterface

    hub = Namespace(cfg=Namespace(generation=OmegaConf.structured(GenerationConfig)))
    config = MultiDocSummarizationHubInterface.generation_config(hub, length_penalty_form="gnmt", lenpen=0.4)
    assert config.length_penalty_form == "gnmt" and config.lenpen == 0.4
    assert "length_penalty_form" not in MultiDocSummarizationHubInterface.generation_config(hub, lenpen=0.4)
    with pytest.raises(ValueError, match="unknown generation option 'length_penalty'"):
        MultiDocSummarizationHubInterface.generation_config(hub, length_penalty="gnmt")


def test_the_hubs_generate_scores_with_the_form_it_is_given():
    from mdsfair.hub_interface import load_hub_entry

    hub = load_hub_entry(
        "hiertransformer",
        os.path.join(golden.GOLDEN_DIR, ARCH),
        checkpoint_file="checkpoint.pt",
        data_name_or_path=os.path.join(golden.GOLDEN_DIR, "data-bin"),
    )
    clusters = [["The cat sat on the mat. It was warm.\n\nThe dog barked.", "Rain fell all day in the town."]]
    settings = {"beam": 3, "lenpen": 1.0, "min_len": 1, "max_len_b": 6}
    for form in LENGTH_PENALTY_FORMS:
        for hypothesis in hub.generate(clusters, length_penalty_form=form, **settings)[0]:
            length = len(hypothesis["tokens"])
            expected = hypothesis["positional_scores"].sum().item() / length_penalty(length, 1.0, form)
            assert hypothesis["score"].item() == pytest.approx(expected, abs=SCORE_TOLERANCE * length)
        assert isinstance(hub.summarize(clusters, length_penalty_form=form, **settings)[0], str)
