"""N-gram blocking: fairseq's blocker blocks nothing in the pinned fairseq;
mdsfair's vectorized blocker equals a reference loop, and the generators the
task builds never repeat an n-gram, for every model family and every path
that generates (fairseq-generate, the hub, the analysis commands)."""

import json
import math
import os

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.configs import GenerationConfig
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.ngram_repeat_block import NGramRepeatBlock
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from fairseq.sequence_scorer import SequenceScorer

from mdsfair.generation.ngram_blocking import VectorizedNGramRepeatBlock, repeated_ngram_ban
from mdsfair.generation.sequence_generator import use_vectorized_ngram_blocker
from tests.utils import TINY_BART_ARGS, USER_DIR, generate_in_process, make_tiny_data_bin

PAD, EOS = 1, 2
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ------------------------------------------------------------- references


def reference_banned_tokens(history, n):
    """Slow reference: the tokens each hypothesis of ``history`` (lists of
    ids, start symbol first) may not generate next, as sets. A token is banned
    when the last n-1 tokens followed by it form an n-gram already in the
    history; the start symbol (position 0) is never itself banned."""
    banned = []
    for tokens in history:
        prefix = tokens[len(tokens) - (n - 1) :] if n > 1 else []
        hypothesis_banned = set()
        for start in range(len(tokens) - n + 1):
            if start + n - 1 == 0:
                continue  # n = 1: the start symbol itself
            if tokens[start : start + n - 1] == prefix:
                hypothesis_banned.add(tokens[start + n - 1])
        banned.append(hypothesis_banned)
    return banned


def has_repeated_ngram(tokens, n=3):
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) != len(set(ngrams))


class FairseqBlockerOnHistory(torch.nn.Module):
    """fairseq's own ``NGramRepeatBlock`` (its Python path) given the history
    ``tokens[:, :step + 1]`` instead of the whole buffer: the fix by slicing,
    as a reference generator component."""

    def __init__(self, n):
        super().__init__()
        self.blocker = NGramRepeatBlock(n, use_extension=False)

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        return self.blocker(tokens[:, : step + 1], lprobs, bsz, beam_size, step)


def random_buffer(rows, step, vocab, max_len, generator):
    """A generator-like buffer: </s> then ``step`` tokens drawn from a small
    vocabulary (4 .. vocab-1, so repeats are frequent), <pad> after."""
    tokens = torch.full((rows, max_len + 2), PAD, dtype=torch.long)
    tokens[:, 0] = EOS
    tokens[:, 1 : step + 1] = torch.randint(4, vocab, (rows, step), generator=generator)
    return tokens


# ---------------------------------------------------- fairseq's behaviour


def test_fairseq_blocker_bans_nothing_on_the_padded_buffer():
    """fairseq's own blocker on a padded buffer: history </s> 7 7 7 at step 3 in a buffer padded
    to 10 columns. The trigram 7 7 7 occurs, so 7 after the suffix (7, 7) must
    be banned; fairseq compares the buffer's last two entries (<pad> <pad>)
    instead and bans nothing."""
    tokens = torch.full((1, 10), PAD)
    tokens[0, :4] = torch.tensor([EOS, 7, 7, 7])
    stock = NGramRepeatBlock(3, use_extension=False)(tokens, torch.zeros(1, 12), 1, 1, 3)
    assert stock[0].eq(0).all()  # fairseq: the last two buffer entries are <pad>, nothing banned
    ours = VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 12), 1, 1, 3)
    assert ours[0, 7] == -math.inf and ours[0].isinf().sum() == 1
    sliced = NGramRepeatBlock(3, use_extension=False)(tokens[:, :4], torch.zeros(1, 12), 1, 1, 3)
    assert torch.equal(sliced, ours)


# --------------------------------------------- the blocker against the loop


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("bsz,beam_size", [(1, 1), (3, 1), (2, 4), (3, 5)])
def test_vectorized_blocker_equals_reference_loop(device, n, bsz, beam_size):
    generator = torch.Generator().manual_seed(100 * n + 10 * bsz + beam_size)
    rows, max_len, vocab = bsz * beam_size, 14, 8
    blocker = VectorizedNGramRepeatBlock(n).to(device)
    bans = 0
    for step in range(0, max_len + 1):  # 0 .. n-1 (too short to block), n, and beyond
        for _ in range(3):
            tokens = random_buffer(rows, step, vocab, max_len, generator)
            lprobs = torch.randn(rows, vocab + 2, generator=generator)
            expected = lprobs.clone()
            for row, banned in enumerate(reference_banned_tokens(tokens[:, : step + 1].tolist(), n)):
                expected[row, sorted(banned)] = -math.inf
                bans += len(banned)
            tokens_d, lprobs_d = tokens.to(device), lprobs.to(device)
            result = blocker(tokens_d, lprobs_d, bsz, beam_size, step)
            assert result.data_ptr() == lprobs_d.data_ptr()  # in place, like fairseq's
            assert torch.equal(result.cpu(), expected), (n, step, tokens[:, : step + 1])
            if n > 1:  # fairseq's Python path on the sliced history agrees (its n = 1 bans nothing)
                sliced = NGramRepeatBlock(n, use_extension=False)(
                    tokens[:, : step + 1], lprobs.clone(), bsz, beam_size, step
                )
                assert torch.equal(sliced, expected)
    assert bans > 0


def test_blocker_edge_cases_and_errors():
    tokens = torch.tensor([[EOS, 5, 5, 5, 5, PAD, PAD]])
    # step 0: only the start symbol; nothing can be banned for any n, not even </s> for n = 1
    for n in (1, 2, 3):
        assert VectorizedNGramRepeatBlock(n)(tokens, torch.zeros(1, 8), 1, 1, 0).eq(0).all()
    # step n-2: the history is exactly n-1 tokens, no earlier n-gram exists
    assert VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 8), 1, 1, 1).eq(0).all()
    # step n-1: </s> 5 5: the suffix (5, 5) has not occurred before it
    assert VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 8), 1, 1, 2).eq(0).all()
    # step n: </s> 5 5 5: (5, 5) -> 5 seen, ban 5
    assert VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 8), 1, 1, 3)[0].isinf().nonzero().tolist() == [[5]]
    # n = 1 bans every generated token but never the start symbol </s>
    banned = VectorizedNGramRepeatBlock(1)(tokens, torch.zeros(1, 8), 1, 1, 1)[0].isinf().nonzero().flatten()
    assert banned.tolist() == [5]
    # half precision, scores passed through unchanged where not banned
    lprobs = torch.randn(1, 8).half()
    result = VectorizedNGramRepeatBlock(2)(tokens, lprobs.clone(), 1, 1, 4)
    assert result.dtype == torch.float16 and result[0, 5] == -math.inf
    assert torch.equal(result[0, torch.arange(8) != 5], lprobs[0, torch.arange(8) != 5])
    with pytest.raises(ValueError, match=">= 1"):
        VectorizedNGramRepeatBlock(0)
    with pytest.raises(ValueError, match="expected 2 hypotheses"):
        VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 8), 1, 2, 3)
    with pytest.raises(ValueError, match="needs 9 history columns"):
        VectorizedNGramRepeatBlock(3)(tokens, torch.zeros(1, 8), 1, 1, 8)


def test_blocker_scripts_like_fairseqs():
    scripted = torch.jit.script(VectorizedNGramRepeatBlock(3))
    generator = torch.Generator().manual_seed(0)
    tokens = random_buffer(6, 9, 6, 12, generator)
    lprobs = torch.randn(6, 8, generator=generator)
    expected = VectorizedNGramRepeatBlock(3)(tokens, lprobs.clone(), 2, 3, 9)
    assert torch.equal(scripted(tokens, lprobs.clone(), 2, 3, 9), expected)
    assert torch.equal(repeated_ngram_ban(tokens[:, :10], lprobs.clone(), 3), expected)


# -------------------------------------------- generators the task builds


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ngram"))


@pytest.fixture(scope="module")
def data_bin(workdir):
    """One data-bin every family reads (DAPE needs the dependency arcs; the
    task gives other models only the inputs their forward accepts)."""
    return make_tiny_data_bin(
        workdir, train=4, valid=4, test=4, vocab_size=300, extra_args=["--side-data", "dep_head", "dep_rel"]
    )


TINY_TRANSFORMER_ARGS = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--share-all-embeddings",
]
FAMILIES = {  # name: (arguments, the model class they build)
    "transformer": (["--arch", "transformer", *TINY_TRANSFORMER_ARGS], "TransformerModel"),
    "bart": (TINY_BART_ARGS, "BARTModel"),
    "hiertransformer": (["--arch", "hiertransformer_tiny"], "HierarchicalTransformerModel"),
    "hierencdec_bart": (["--arch", "hierencdec_bart_tiny"], "HierEncDecBARTModel"),
    "pagesum_bart": (["--arch", "pagesum_bart_tiny", "--num-pages", "3"], "PageSumBARTModel"),
    "sparse_bart": (
        ["--arch", "sparse_bart_tiny", "--top-r", "2", "--task", "multidoc_summarization_sparse"],
        "SparseBARTModel",
    ),
    "dape_transformer": (["--arch", "dape_transformer_tiny"], "DapeTransformerModel"),
}
GENERATION = dict(beam=4, max_len_b=16, min_len=16)
BATCH = 3


def build(data_bin, family):
    """A tiny model of ``family`` with seeded random weights scaled up (a
    sharp random model, which repeats itself) and its task."""
    argv = [
        data_bin,
        "--user-dir",
        USER_DIR,
        "--task",
        "multidoc_summarization",
        "--max-source-positions",
        "512",
        "--dropout",
        "0",
        "--seed",
        "1",
        *FAMILIES[family][0],
    ]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    assert type(model).__name__ == FAMILIES[family][1]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return args, task, model


@pytest.fixture(scope="module")
def first_test_examples(data_bin):
    args, task, _ = build(data_bin, "transformer")
    task.load_dataset("test")
    dataset = task.datasets["test"]
    return dataset.collater([dataset[i] for i in range(BATCH)])


def test_fairseq_sequence_generator_hands_the_blocker_the_whole_padded_buffer(data_bin, first_test_examples):
    """fairseq's SequenceGenerator calls the blocker with its full
    ``[bsz * beam, max_len + 2]`` buffer, <pad> after the current step (the
    reason its blocker sees only <pad>), and so repeats trigrams with
    blocking on."""
    _, task, model = build(data_bin, "transformer")
    generator = SequenceGenerator(
        [model], task.target_dictionary, beam_size=4, max_len_b=16, min_len=16, no_repeat_ngram_size=3
    )
    assert type(generator.repeat_ngram_blocker) is NGramRepeatBlock
    calls = []
    stock_forward = generator.repeat_ngram_blocker.forward

    def spy(tokens, lprobs, bsz, beam_size, step):
        calls.append((step, tokens.clone()))
        return stock_forward(tokens, lprobs, bsz, beam_size, step)

    generator.repeat_ngram_blocker.forward = spy
    with torch.no_grad():
        hypos = task.inference_step(generator, [model], first_test_examples)
    assert len(calls) == 17 and all(tokens.size(1) == 16 + 2 for _, tokens in calls)
    assert all(tokens[:, step + 1 :].eq(PAD).all() for step, tokens in calls)
    assert any(has_repeated_ngram(h["tokens"].tolist()) for hypotheses in hypos for h in hypotheses)


def test_generator_replacement_keeps_the_generator_and_its_n(data_bin):
    _, task, model = build(data_bin, "transformer")
    dictionary = task.target_dictionary
    for cls in (SequenceGenerator, SequenceGeneratorWithAlignment):
        kwargs = {"print_alignment": "hard"} if cls is SequenceGeneratorWithAlignment else {}
        generator = cls([model], dictionary, beam_size=2, no_repeat_ngram_size=4, **kwargs)
        assert use_vectorized_ngram_blocker(generator) is generator
        assert isinstance(generator.repeat_ngram_blocker, VectorizedNGramRepeatBlock)
        assert generator.repeat_ngram_blocker.no_repeat_ngram_size == 4
    unblocked = SequenceGenerator([model], dictionary, beam_size=2)
    assert use_vectorized_ngram_blocker(unblocked).repeat_ngram_blocker is None
    scorer = SequenceScorer(dictionary)
    assert use_vectorized_ngram_blocker(scorer) is scorer
    generator.repeat_ngram_blocker = torch.nn.Identity()
    with pytest.raises(TypeError, match="not fairseq's NGramRepeatBlock"):
        use_vectorized_ngram_blocker(generator)
    # the task's build_generator: --print-alignment and --score-reference paths too
    built = task.build_generator([model], GenerationConfig(beam=2, no_repeat_ngram_size=3, print_alignment="hard"))
    assert type(built) is SequenceGeneratorWithAlignment
    assert isinstance(built.repeat_ngram_blocker, VectorizedNGramRepeatBlock)
    assert type(task.build_generator([model], GenerationConfig(score_reference=True))) is SequenceScorer


def generate(task, model, sample, **generation):
    generator = task.build_generator([model], GenerationConfig(**{**GENERATION, **generation}))
    with torch.no_grad():
        return generator, task.inference_step(generator, [model], sample)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_generated_hypothesis_repeats_a_trigram(data_bin, first_test_examples, family):
    _, task, model = build(data_bin, family)
    generator, unblocked = generate(task, model, first_test_examples, no_repeat_ngram_size=0)
    assert generator.repeat_ngram_blocker is None
    # the same model, unblocked, does repeat (else this test could not fail)
    assert any(has_repeated_ngram(h["tokens"].tolist()) for hypotheses in unblocked for h in hypotheses)

    generator, blocked = generate(task, model, first_test_examples, no_repeat_ngram_size=3)
    assert isinstance(generator.repeat_ngram_blocker, VectorizedNGramRepeatBlock)
    assert len(blocked) == BATCH
    for hypotheses in blocked:
        assert len(hypotheses) == GENERATION["beam"]
        for hypothesis in hypotheses:
            tokens = hypothesis["tokens"].tolist()
            assert len(tokens) == GENERATION["min_len"] + 1 and tokens[-1] == EOS
            assert not has_repeated_ngram(tokens), tokens

    # equal, hypothesis by hypothesis and score by score, to fairseq's generator
    # with fairseq's own blocker fixed by slicing the history
    generator.repeat_ngram_blocker = FairseqBlockerOnHistory(3)
    with torch.no_grad():
        reference = task.inference_step(generator, [model], first_test_examples)
    for ours, theirs in zip(blocked, reference):
        for a, b in zip(ours, theirs):
            assert torch.equal(a["tokens"], b["tokens"])
            assert float(a["score"]) == float(b["score"])


def test_analysis_commands_generate_with_the_blocker(data_bin, first_test_examples):
    """``mdsfair-page-importance`` decodes with the task's generator:
    blocked, its summaries never repeat a trigram (the unblocked do);
    ``mdsfair-attention-analysis`` builds ``task.build_generator`` from a
    GenerationConfig, as here."""
    from mdsfair.evaluation.page_importance import generated_summaries

    _, task, model = build(data_bin, "pagesum_bart")
    blocked = generated_summaries(
        task, model, first_test_examples, GenerationConfig(**GENERATION, no_repeat_ngram_size=3)
    )
    unblocked = generated_summaries(task, model, first_test_examples, GenerationConfig(**GENERATION))
    assert not any(has_repeated_ngram(summary.tolist()) for summary in blocked)
    assert any(has_repeated_ngram(summary.tolist()) for summary in unblocked)


def test_hub_summarize_and_fairseq_generate_block_trigrams(data_bin, workdir, tmp_path):
    from mdsfair.hub_interface import MultiDocSummarizationHubInterface

    args, task, model = build(data_bin, "bart")
    cfg = convert_namespace_to_omegaconf(args)
    clusters = [json.loads(line) for line in open(os.path.join(workdir, "raw", "test.jsonl"), encoding="utf-8")]
    hub = MultiDocSummarizationHubInterface(cfg, task, [model])
    hub.eval()
    options_ = dict(beam=4, max_len_b=16, min_len=16)
    hub_blocked = hub.generate(clusters, batch_size=2, no_repeat_ngram_size=3, **options_)
    hub_unblocked = hub.generate(clusters, batch_size=2, **options_)
    assert any(has_repeated_ngram(h["tokens"].tolist()) for hypos in hub_unblocked for h in hypos)
    assert all(not has_repeated_ngram(h["tokens"].tolist()) for hypos in hub_blocked for h in hypos)
    summaries = hub.summarize(clusters, no_repeat_ngram_size=3, **options_)
    assert summaries == [hub.decode(hypos[0]["tokens"]) for hypos in hub_blocked]

    # fairseq-generate on a checkpoint of the same weights
    path = str(tmp_path / "checkpoint.pt")
    checkpoint_utils.torch_persistent_save(
        {
            "cfg": cfg,
            "model": model.state_dict(),
            "args": None,
            "extra_state": {},
            "optimizer_history": [
                {
                    "criterion_name": "CrossEntropyCriterion",
                    "optimizer_name": "Adam",
                    "lr_scheduler_state": {},
                    "num_updates": 0,
                }
            ],
        },
        path,
    )
    generated = {}
    for n in (0, 3):
        results = str(tmp_path / f"results{n}")
        output = generate_in_process(
            [
                data_bin,
                "--user-dir",
                USER_DIR,
                "--task",
                "multidoc_summarization",
                "--path",
                path,
                "--gen-subset",
                "test",
                "--beam",
                "4",
                "--nbest",
                "4",
                "--max-len-b",
                "16",
                "--min-len",
                "16",
                "--no-repeat-ngram-size",
                str(n),
                "--batch-size",
                "2",
                "--num-workers",
                "0",
                "--cpu",
                "--max-source-positions",
                "512",
            ],
            results,
        )
        generated[n] = [line.split("\t")[2].split() for line in output.splitlines() if line.startswith("H-")]
        assert len(generated[n]) == 4 * len(clusters)
    assert any(has_repeated_ngram(tokens) for tokens in generated[0])
    assert not any(has_repeated_ngram(tokens) for tokens in generated[3])
