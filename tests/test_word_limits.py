"""Summary length limits in words (--min-len-words / --max-len-words,
mdsfair.generation.word_limits): the word count of a history by hand, the
bans of one step, and generation with a tiny model whose every hypothesis,
decoded and split on whitespace, holds the words the limits allow, with both
generators (the unlimited model's summaries fall outside them, so the test
can fail). DAPE's limits are read from its paper's text."""

import math
from types import SimpleNamespace

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.configs import GenerationConfig

from mdsfair.generation.word_limits import WordLengthLimits, WordLimitError, check_word_limits, word_openings
from mdsfair.tasks.summary_word_limits import requested_word_limits, word_tables
from tests.utils import USER_DIR, make_tiny_data_bin, paper_text, tiny_transformer

# a toy vocabulary: 0 <s>, 1 <pad>, 2 </s>, 3 <unk>, 4 "▁the", 5 "▁cat", 6 "s", 7 ".", 8 "<doc-sep>"
WORD_START = torch.tensor([False, False, False, False, True, True, False, False, False])
TEXT = torch.tensor([False, False, False, False, True, True, True, True, False])
EOS = 2


def test_words_are_counted_at_word_initial_symbols_and_after_control_symbols():
    # "▁the ▁cat s ." = "the cats." (2 words); "s ▁the" = "s the" (the first text symbol opens a word);
    # "▁the <doc-sep> s" = 2 words ("s" follows a control symbol)
    generated = torch.tensor([[4, 5, 6, 7], [6, 4, 1, 1], [4, 8, 6, 1]])
    opens = word_openings(generated, WORD_START, TEXT)
    assert opens.tolist() == [
        [True, True, False, False],
        [True, True, False, False],
        [True, False, True, False],
    ]


def _step(limits, history, step):
    tokens = torch.full((len(history), 8), 1)
    tokens[:, 0] = EOS  # the start symbol
    for row, generated in enumerate(history):
        tokens[row, 1 : len(generated) + 1] = torch.tensor(generated, dtype=torch.long)
    lprobs = torch.log(torch.full((len(history), 9), 1 / 9, dtype=torch.float64))
    return limits(tokens, lprobs, len(history), 1, step)


def test_one_step_bans_the_end_below_the_minimum_and_new_words_at_the_maximum():
    limits = WordLengthLimits(WORD_START, TEXT, EOS, min_words=2, max_words=2)
    # row 0 holds 1 word ("▁the"), row 1 two ("▁the ▁cat")
    lprobs = _step(limits, [[4, 7], [4, 5]], step=2)
    assert math.isinf(lprobs[0, EOS]) and math.isfinite(lprobs[1, EOS])
    # row 1 is full: "▁the", "▁cat" banned, "s", "." and </s> open; row 0 may begin its second word
    assert [math.isinf(v) for v in lprobs[1, 4:8].tolist()] == [True, True, False, False]
    assert all(math.isfinite(v) for v in lprobs[0, 4:8].tolist())
    # </s> forced by the token limit (every other token -inf) stays open below the minimum
    tokens = torch.tensor([[EOS, 4, 1, 1]])
    forced = torch.full((1, 9), -math.inf, dtype=torch.float64)
    forced[0, EOS] = 0.0
    assert limits(tokens, forced, 1, 1, 1)[0, EOS] == 0.0


def test_the_limits_wrap_the_ngram_blocker_and_refuse_impossible_settings():
    calls = []

    class Blocker(torch.nn.Module):
        def forward(self, tokens, lprobs, bsz, beam_size, step):
            calls.append(step)
            return lprobs

    limits = WordLengthLimits(WORD_START, TEXT, EOS, max_words=3, inner=Blocker())
    _step(limits, [[4]], step=1)
    assert calls == [1]
    for low, high, message in [(5, 3, "above --max-len-words 3"), (-1, None, "at least 0"), (None, 0, "at least 1")]:
        with pytest.raises(WordLimitError, match=message):
            check_word_limits(low, high)


def test_mdsfair_generate_refuses_impossible_limits_before_loading_a_model(capsys):
    """One line and exit status 2, from the command's early checks (no model, no data: a traceback from the
    generator's construction otherwise)."""
    from mdsfair.cli import check_generation_arguments

    with pytest.raises(SystemExit) as exit_info:
        check_generation_arguments(["DATA", "--path", "missing.pt", "--min-len-words", "9", "--max-len-words", "6"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error == "mdsfair-generate: error: --min-len-words 9 is above --max-len-words 6: no summary can satisfy both"
    check_generation_arguments(["DATA", "--path", "missing.pt", "--min-len-words", "6", "--max-len-words", "9"])


def test_a_generation_config_limit_takes_precedence_over_the_task_flag():
    class Config:
        min_len_words = 20
        max_len_words = 30

    generation = GenerationConfig()
    assert requested_word_limits(generation, Config()) == (20, 30)
    generation.min_len_words = 10  # as the hub's generate() or --eval-rouge-args would set it
    assert requested_word_limits(generation, Config()) == (10, 30)


def test_the_hubs_generation_config_takes_the_word_limits():
    from omegaconf import OmegaConf

    from mdsfair.hub_interface import MultiDocSummarizationHubInterface

    hub = SimpleNamespace(cfg=SimpleNamespace(generation=OmegaConf.structured(GenerationConfig)))
    config = MultiDocSummarizationHubInterface.generation_config(hub, beam=5, min_len_words=200, max_len_words=300)
    assert requested_word_limits(config, SimpleNamespace(min_len_words=None, max_len_words=None)) == (200, 300)
    with pytest.raises(ValueError, match="unknown generation option 'min_words'"):
        MultiDocSummarizationHubInterface.generation_config(hub, min_words=200)


# ----------------------------------------------------- generation end to end


@pytest.fixture(scope="module")
def task_and_model(tmp_path_factory):
    data_bin = make_tiny_data_bin(str(tmp_path_factory.mktemp("words")), train=4, valid=2, test=4, vocab_size=300)
    argv = [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization", *tiny_transformer(attention_heads=2)]
    argv += ["--max-source-positions", "512", "--dropout", "0", "--seed", "1"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    with torch.no_grad():  # sharpen the random model so its summaries differ in length
        generator = torch.Generator().manual_seed(0)
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    return task, model, dataset.collater([dataset[i] for i in range(4)])


def _summary_word_counts(task, model, sample, fairseq_generator, **generation):
    task.cfg.fairseq_generator = fairseq_generator
    generator = task.build_generator([model], GenerationConfig(beam=3, **generation))
    with torch.no_grad():
        hypotheses = task.inference_step(generator, [model], sample)
    encoder = task.subword_encoder()
    dictionary = task.target_dictionary
    counts = []
    for per_example in hypotheses:
        for hypothesis in per_example:
            symbols = [dictionary[i] for i in hypothesis["tokens"].tolist() if i != dictionary.eos()]
            counts.append(len(encoder.decode(symbols).split()))
    return counts


@pytest.mark.parametrize("fairseq_generator", [False, True], ids=["static", "fairseq"])
@pytest.mark.parametrize(
    "eos_scale, outside",
    [(1.0, lambda count: count > 9), (3.0, lambda count: count < 6)],
    ids=["long-model", "short-model"],
)
def test_every_summary_holds_the_words_the_limits_allow(task_and_model, fairseq_generator, eos_scale, outside):
    """The random model as it is writes summaries of more than 9 words; with
    its </s> embedding scaled by 3 (so </s> wins early) some of fewer than 6.
    Limited to 6-9 words, every summary of both holds 6 to 9."""
    task, model, sample = task_and_model
    eos_row = model.decoder.embed_tokens.weight.data[task.target_dictionary.eos()]
    unscaled = eos_row.clone()
    settings = dict(max_len_b=60, min_len=1, no_repeat_ngram_size=2)
    try:
        eos_row.mul_(eos_scale)
        free = _summary_word_counts(task, model, sample, fairseq_generator, **settings)
        task.cfg.min_len_words, task.cfg.max_len_words = 6, 9
        limited = _summary_word_counts(task, model, sample, fairseq_generator, **settings)
    finally:
        eos_row.copy_(unscaled)
        task.cfg.min_len_words = task.cfg.max_len_words = None
    assert any(outside(count) for count in free), free  # else the limits would have nothing to do
    assert all(6 <= count <= 9 for count in limited), limited


def test_word_tables_follow_the_subword_model(task_and_model):
    task = task_and_model[0]
    dictionary = task.target_dictionary
    word_start, text = word_tables(task.subword_encoder(), dictionary)
    for index in range(dictionary.nspecial):
        assert not text[index] and not word_start[index]
    for index in range(dictionary.nspecial, len(dictionary)):
        assert bool(word_start[index]) == dictionary[index].startswith("\u2581")


def test_dape_limits_are_the_papers():
    """DAPE (Ma et al. 2022, Sec. IV-B) limits its summaries in words, not tokens:
    200-300 on Multi-News, 110-300 on Multi-XScience (no word limit on the input)."""
    text = paper_text("dape-linguistic-ma2022.txt")
    assert (
        "The minimum and maximum lengths of the generated summaries are set to 200 and 300 words for the "
        "Multi-News dataset, while 110 and 300 words for the Multi-XScience dataset." in text
    )
    assert "truncat" not in text.lower()
