"""Host work per step: operator calls and host-device synchronizations of every
efficiency-selling system against the stock model it improves on (issue 35).

On a GPU these systems are host-bound at the sizes users run: the time goes to
launching many small operators and to waiting for values read back to the
host, not to the arithmetic. Both counts are deterministic on CPU (the same
operators are dispatched whatever the device), so they can be measured here
and kept in tests (``tests/test_operator_counts.py``) while wall-clock
figures need the device.

Counted over one step with ``torch.profiler`` (CPU activity):

* ``operators``: every ``aten::`` operator call the step dispatches (nested
  calls included: each costs host time);
* ``syncs``: the calls that read a tensor's value on the host, which on a GPU
  wait for the device: ``aten::item`` / ``aten::_local_scalar_dense`` and
  ``aten::nonzero`` (whose output size depends on the values), plus every
  ``Tensor.tolist()`` (not an operator: counted by wrapping it for the step).

The steps, each at fixed small shapes, against the stock model at the same
shapes and width:

* ``sparse``: one incremental decoding step (beam reorder of the
  caches, the decoder, ``log_softmax``) of ``sparse_bart`` with r = 5, as
  the static-shape generator drives it, against two models with full
  cross-attention: the same model with ``--cross-attention full`` (the
  same decoder layer, fairseq's cross-attention module, and the in-place
  self-attention caches of every mdsfair decoder), and fairseq's stock
  ``bart`` (its own decoder, the model a user would otherwise run); target
  at most 1.0x, no synchronization (the step as it runs on a GPU: on the
  CPU it reads each layer's kept-token width, which there waits for nothing);
* ``hierencdec``: one encoder forward (batch 1) of ``hierencdec_bart``
  against fairseq's ``bart`` encoder; target at most 1.1x, at most one
  synchronization per batch;
* ``dape``: one training step (forward + backward) of ``dape_transformer``
  against fairseq's ``transformer``; target at most 1.3x;
* ``hiertransformer``: one training step of ``hiertransformer`` against the
  flat ``transformer`` of the same depth; target at most 1.2x.

    python benchmarks/operator_counts.py                                        # the table
    python benchmarks/operator_counts.py --json benchmarks/results/operator_counts_cpu.json
"""

import contextlib
import os
import sys
from argparse import Namespace
from typing import Callable, Dict, NamedTuple

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import mdsfair

mdsfair.register()

from benchmarks import harness
from benchmarks.measure import every_logit_training_step
from mdsfair.generation.fast import make_generation_fast_
from mdsfair.generation.fast.static_beam_search import (
    StaticBeamSearch,
    following_static_beam_search,
)

SYNC_OPERATORS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")


class Counts(NamedTuple):
    """Operator calls and host-device synchronizations of one step."""

    operators: int
    syncs: int
    sync_detail: Dict[str, int]


@contextlib.contextmanager
def counting_tolist(counter: Dict[str, int]):
    """Count ``Tensor.tolist()`` calls while active (they read the values back
    like ``item()`` but dispatch no operator the profiler sees)."""
    original = torch.Tensor.tolist

    def tolist(self):
        counter["tolist"] = counter.get("tolist", 0) + 1
        return original(self)

    torch.Tensor.tolist = tolist
    try:
        yield
    finally:
        torch.Tensor.tolist = original


def count_step(step: Callable[[], object]) -> Counts:
    """:class:`Counts` of one call of ``step`` (run it once before, so that
    one-time work such as caches is not counted)."""
    from torch.profiler import ProfilerActivity, profile

    detail: Dict[str, int] = {}
    with counting_tolist(detail), profile(activities=[ProfilerActivity.CPU]) as profiler:
        step()
    operators = 0
    for event in profiler.events():
        if event.name.startswith("aten::"):
            operators += 1
            if event.name in SYNC_OPERATORS:
                detail[event.name] = detail.get(event.name, 0) + 1
    # item() dispatches _local_scalar_dense inside it: one synchronization, counted once
    syncs = (
        detail.get("aten::item", detail.get("aten::_local_scalar_dense", 0))
        if "aten::item" in detail
        else detail.get("aten::_local_scalar_dense", 0)
    )
    syncs += detail.get("aten::nonzero", 0) + detail.get("tolist", 0)
    return Counts(operators, syncs, detail)


def build(arch: str, dictionary, **overrides):
    """``arch`` (a registered architecture) with its parser's defaults, the
    architecture's settings and ``overrides``, as fairseq-train builds it
    (:func:`benchmarks.harness.synthetic_model`), seeded, in eval mode."""
    torch.manual_seed(0)
    return harness.synthetic_model(arch, dictionary, **overrides).eval()


# ----------------------------------------------------------------- decoding


def sentence_source(dictionary, batch_size: int, source_tokens: int, sentence_tokens: int):
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (batch_size, source_tokens), generator=generator)
    tokens[:, -1] = dictionary.eos()
    sentence_ids = (torch.arange(source_tokens) // sentence_tokens).repeat(batch_size, 1)
    sentence_ids[:, -1] = sentence_ids[:, -2]
    return {"src_tokens": tokens, "src_lengths": torch.full((batch_size,), source_tokens), "src_sent_ids": sentence_ids}


class DecodingState:
    """A model mid-way through beam search, as mdsfair's static-shape
    generator drives it (``--static-decoding``,
    :mod:`mdsfair.generation.static_decoding`): the encoder output expanded
    to ``batch * beam`` rows once, the incremental state, and every step a
    reorder of the decoder's caches within each source's beam followed by
    one decoder call, with the model's decoding speed-ups in place and its
    fast modules following a static beam search that keeps no attention, as
    that generator runs them (mdsfair's decoders keep their self-attention
    caches in place and compute no attention for an alignment). With
    ``reorder_encoder_out`` the encoder output is reordered at every step
    too, as fairseq's ``SequenceGenerator`` does."""

    def __init__(self, model, net_input: dict, beam: int, warm_steps: int = 3, reorder_encoder_out: bool = False):
        self.model, self.beam, self.reorder_encoder_out = model, beam, reorder_encoder_out
        batch_size = net_input["src_tokens"].size(0)
        inputs = model.encoder_inputs(net_input) if hasattr(model, "encoder_inputs") else net_input
        with torch.no_grad():
            encoder_out = model.encoder(**inputs)
            expand = torch.arange(batch_size).view(-1, 1).repeat(1, beam).view(-1)
            self.encoder_out = model.encoder.reorder_encoder_out(encoder_out, expand)
        self.incremental_state: Dict = {}
        # reorders stay within a source's beam, and the attention over the source is not kept (no
        # --print-alignment), as in the static generator
        make_generation_fast_(model)
        self.search = StaticBeamSearch(batch_size * beam, beam)
        self.tokens = torch.full((batch_size * beam, 1), model.decoder.dictionary.eos())
        generator = torch.Generator().manual_seed(1)
        # a fixed permutation within every source's beam, as beam search reorders
        self.orders = [
            (torch.arange(batch_size).view(-1, 1) * beam + torch.randperm(beam, generator=generator)).view(-1)
            for _ in range(64)
        ]
        for _ in range(warm_steps):
            self.step()

    def step(self):
        """One generation step: reorder, decode the last token, log-softmax."""
        model = self.model
        step = self.tokens.size(1)
        with torch.no_grad(), following_static_beam_search([model], [self.search]):
            if step > 1:
                order = self.orders[step % len(self.orders)]
                self.search.reorder(order)
                model.decoder.reorder_incremental_state_scripting(self.incremental_state, order)
                if self.reorder_encoder_out:
                    self.encoder_out = model.encoder.reorder_encoder_out(self.encoder_out, order)
            logits, _ = model.decoder(
                self.tokens, encoder_out=self.encoder_out, incremental_state=self.incremental_state
            )
            self.search.advance()
            lprobs = torch.log_softmax(logits[:, -1:], dim=-1)
        next_tokens = lprobs[:, -1].argmax(-1, keepdim=True).clamp(min=model.decoder.dictionary.nspecial)
        self.tokens = torch.cat([self.tokens, next_tokens], dim=1)


def sparse_decoding_counts(
    top_r: int = 5,
    layers: int = 6,
    dim: int = 64,
    heads: int = 4,
    vocab: int = 200,
    batch_size: int = 2,
    beam: int = 4,
    source_tokens: int = 240,
    sentence_tokens: int = 12,
):
    """Counts of one decoding step: ``sparse_bart`` (r = ``top_r``), the same
    model with fairseq's full cross-attention (``--cross-attention full``:
    the same decoder, in-place self-attention caches included), and
    fairseq's stock ``bart`` (its own decoder, beamable cross-attention as
    ``set_beam_size`` makes it for beam search)."""
    dictionary = harness.synthetic_dictionary(vocab)
    dims = harness.dimensions(layers, dim, 4 * dim, heads, max_source_positions=source_tokens, max_target_positions=128)
    net_input = sentence_source(dictionary, batch_size, source_tokens, sentence_tokens)
    sparse = build("sparse_bart_base", dictionary, top_r=top_r, **dims)
    full = build("sparse_bart_base", dictionary, cross_attention="full", **dims)
    stock = build("bart_base", dictionary, **dims)
    stock.set_beam_size(beam)
    words_only = {k: v for k, v in net_input.items() if k != "src_sent_ids"}
    results = {}
    for name, model, inputs in (
        ("sparse", sparse, net_input),
        ("full cross-attention", full, words_only),
        ("stock bart", stock, words_only),
    ):
        with kept_width_of_an_accelerator():  # the warm-up steps too: their tables are the counted step's
            state = DecodingState(model, inputs, beam)
            results[name] = count_step(state.step)
    return results


@contextlib.contextmanager
def kept_width_of_an_accelerator():
    """The sparse generation step as it runs on a GPU, where the counts
    matter: its kept-token layout padded to the bound known before the
    generation, for one pair of products. On the CPU it reads every
    source's widest row in the step instead and multiplies each source's
    rows over that width (one host read per layer, which there waits for
    nothing:
    :meth:`~mdsfair.generation.fast.sparse_generation_step.SparseGenerationStep.sizes_kept_tokens_per_step`)."""
    from mdsfair.generation.fast.sparse_generation_step import SparseGenerationStep

    policy = SparseGenerationStep.kept_width
    SparseGenerationStep.kept_width = "bound"
    try:
        yield
    finally:
        SparseGenerationStep.kept_width = policy


# ----------------------------------------------------------------- encoders and training steps


def hierencdec_encoder_counts(
    layers: int = 6, dim: int = 64, heads: int = 4, vocab: int = 200, source_tokens: int = 256, documents: int = 4
):
    """Counts of one encoder forward at batch 1: ``hierencdec_bart`` and BART."""
    from benchmarks.hierencdec import synthetic_source

    dictionary = harness.synthetic_dictionary(vocab)
    dims = harness.dimensions(
        layers, dim, 4 * dim, heads, max_source_positions=source_tokens, dropout=0.0, attention_dropout=0.0
    )
    torch.manual_seed(0)
    tokens, document_ids = synthetic_source(dictionary, 1, source_tokens, documents, "cpu")
    hier = build("hierencdec_bart_base", dictionary, **dims)
    bart = build("bart_base", dictionary, **dims)
    results = {}
    for name, model, inputs in (
        ("hierencdec", hier, {"src_tokens": tokens, "src_doc_ids": document_ids}),
        ("bart", bart, {"src_tokens": tokens}),
    ):

        def step(model=model, inputs=inputs):
            with torch.no_grad():
                model.encoder(**inputs)

        step()
        results[name] = count_step(step)
    return results


def training_counts(arch: str, inputs: dict, dictionary, dims: dict) -> Dict[str, Counts]:
    """``{arch: counts}`` of one training step (forward, a loss over every
    logit, backward) of ``arch`` on ``inputs``."""
    step = every_logit_training_step(build(arch, dictionary, **dims).train(), inputs)
    step()
    return {arch: count_step(step)}


def dape_training_counts(
    layers: int = 2,
    dim: int = 64,
    heads: int = 4,
    vocab: int = 200,
    batch_size: int = 2,
    source_tokens: int = 120,
    doc_tokens: int = 40,
):
    """Counts of one training step: ``dape_transformer`` and fairseq's ``transformer``."""
    from benchmarks.dape_transformer import batch as dape_batch

    dictionary = harness.synthetic_dictionary(vocab)
    dims = harness.dimensions(
        layers,
        dim,
        4 * dim,
        heads,
        max_source_positions=source_tokens,
        max_target_positions=64,
        share_all_embeddings=True,
    )
    opts = Namespace(batch_size=batch_size, doc_tokens=doc_tokens, device="cpu")
    net_input = dape_batch(opts, source_tokens)
    # the benchmark's vocabulary is its own; keep token ids inside this dictionary
    for key in ("src_tokens", "prev_output_tokens"):
        net_input[key] = net_input[key] % (vocab - dictionary.nspecial) + dictionary.nspecial
    stock_input = {k: net_input[k] for k in ("src_tokens", "src_lengths", "prev_output_tokens")}
    return {
        **training_counts("dape_transformer", net_input, dictionary, dims),
        **training_counts("transformer", stock_input, dictionary, dims),
    }


def hiertransformer_training_counts(
    vocab: int = 200, batch_size: int = 2, paragraphs: int = 6, length: int = 10, target_tokens: int = 12
):
    """Counts of one training step: ``hiertransformer`` (5 local + 2 global
    layers) and the flat ``transformer`` with 7 encoder layers, d 64."""
    from benchmarks.hiertransformer import model_flags, synthetic_batch

    dictionary = harness.synthetic_dictionary(vocab)
    batch, _ = synthetic_batch(harness.SyntheticTask(dictionary), batch_size, paragraphs, length, target_tokens, "cpu")
    stock_input = {k: v for k, v in batch.items() if k != "src_para_ids"}
    results = {}
    for name, inputs in (("hiertransformer", batch), ("transformer", stock_input)):
        dims = model_flags(name, 64, 4, max_source_positions=1024, max_target_positions=64)
        results.update(training_counts(name, inputs, dictionary, dims))
    return results


#: system: (function, its row, the stock row, operator-ratio target, most syncs allowed)
COMPARISONS = {
    "sparse decoder, one decoding step": (sparse_decoding_counts, "sparse", "full cross-attention", 1.0, 0),
    "sparse decoder, one decoding step, against stock BART": (sparse_decoding_counts, "sparse", "stock bart", 1.0, 0),
    "HierEncDec, one encoder step at batch 1": (hierencdec_encoder_counts, "hierencdec", "bart", 1.1, 1),
    "DAPE, one training step": (dape_training_counts, "dape_transformer", "transformer", 1.3, None),
    "hiertransformer, one training step": (
        hiertransformer_training_counts,
        "hiertransformer",
        "transformer",
        1.2,
        None,
    ),
}


def measure_all() -> Dict[str, dict]:
    table, measured = {}, {}
    for label, (function, system, stock, target, most_syncs) in COMPARISONS.items():
        if function not in measured:  # one measurement per function, for every comparison that reads it
            measured[function] = function()
        counts = measured[function]
        table[label] = {
            "system": system,
            "stock": stock,
            "operators": counts[system].operators,
            "stock_operators": counts[stock].operators,
            "ratio": counts[system].operators / counts[stock].operators,
            "target": target,
            "syncs": counts[system].syncs,
            "stock_syncs": counts[stock].syncs,
            "most_syncs": most_syncs,
            "sync_detail": counts[system].sync_detail,
        }
    return table


def main(argv=None):
    from benchmarks import results

    parser = harness.argument_parser(__doc__, whole_docstring=True)
    results.add_argument(parser)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    # counts are deterministic: one "repeat", and the cells' spread is the count itself
    rows = harness.result_rows(options, "operator_counts", argv, 1, device="cpu")
    table = measure_all()
    print(f"torch {torch.__version__}; operator calls per step (aten::, nested included) and host-device syncs")
    width = max(len(label) for label in table)
    print(f"{'step':<{width}} {'ops':>6} {'stock':>6} {'ratio':>6} {'target':>6} {'syncs':>6} {'stock':>6}")
    for label, row in table.items():
        met = "met" if row["ratio"] <= row["target"] else "missed"
        print(
            f"{label:<{width}} {row['operators']:>6} {row['stock_operators']:>6} {row['ratio']:>6.2f} "
            f"{row['target']:>6.2f} {row['syncs']:>6} {row['stock_syncs']:>6}  {met}  {row['sync_detail']}"
        )

    def count(value):
        return results.cell(value, value, value)

    rows.add(
        *[
            {
                "step": label,
                "system": row["system"],
                "stock": row["stock"],
                "operators": count(row["operators"]),
                "stock_operators": count(row["stock_operators"]),
                "ratio": count(round(row["ratio"], 3)),
                "target": row["target"],
                "target_met": row["ratio"] <= row["target"],
                "syncs": row["syncs"],
                "stock_syncs": row["stock_syncs"],
                "most_syncs_allowed": row["most_syncs"],
            }
            for label, row in table.items()
        ],
        notes="operator calls are every aten:: call of one step (nested included); syncs are item / "
        "_local_scalar_dense, nonzero and Tensor.tolist calls; both deterministic on CPU",
    )


if __name__ == "__main__":
    main()
