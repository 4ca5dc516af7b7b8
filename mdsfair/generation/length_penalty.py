"""The length penalty a beam search divides a finished hypothesis's
log-probability by before ranking it (``--length-penalty-form``, with
``--lenpen`` as its exponent alpha), in one of two forms:

* ``fairseq``: ``lp(len) = len ** alpha``, what fairseq's
  ``SequenceGenerator.finalize_hypos`` divides by
  (``eos_scores /= (step + 1) ** self.len_penalty``); the default.
* ``gnmt``: ``lp(len) = ((5 + len) / 6) ** alpha``, the length penalty of
  Google's NMT system (Wu et al. 2016, "Google's Neural Machine Translation
  System", section 7: ``s(Y, X) = log P(Y|X) / lp(Y)`` with
  ``lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha``), which the Hierarchical
  Transformer (Liu & Lapata 2019) decodes with, alpha = 0.4.

In both, ``len`` is the hypothesis's number of tokens with its closing
``</s>``: the step that generated the ``</s>`` plus one (fairseq's
``step + 1``). The authors of the Hierarchical Transformer compute
``((5.0 + (step + 1)) / 6.0) ** alpha`` at every step of their beam search
(``nlpyang/hiersumm``, ``src/abstractive/predictor_builder.py``,
``_fast_translate_batch``), the same ``len``, and divide every live
hypothesis's cumulative log-probability by it; at one step every live
hypothesis has the same length, so that division leaves the ranking of the
live hypotheses as it is and changes only the scores of the finished ones,
which they then rank by that score. Dividing a finished hypothesis's
log-probability by ``lp(len)`` when it is finalized, as fairseq does with its
own form, gives the same scores and the same ranking.

Their search differs from fairseq's beam search in when it stops, which this
option leaves as fairseq does it: they keep ``beam`` candidates per step
(fairseq ``2 * beam``, so that ``beam`` hypotheses stay alive), a finished
hypothesis keeps its place among the live ones, and a cluster is done as
soon as its best live hypothesis ends (all its live hypotheses then count
as finished, ended or not), where fairseq waits for ``beam`` finished
hypotheses.

:class:`LengthPenaltySequenceGenerator` is fairseq's ``SequenceGenerator``
with the form as a choice; mdsfair's static-shape generator
(:mod:`mdsfair.generation.static_decoding`) derives from it, so both rank
with :func:`length_penalty`.
"""

from typing import Union

import torch
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

#: the forms of ``--length-penalty-form``; the first is the default
LENGTH_PENALTY_FORMS = ("fairseq", "gnmt")

#: the name of the option in a generation config (``--eval-rouge-args``, the hub's ``generate()``)
LENGTH_PENALTY_OPTION = "length_penalty_form"


def length_penalty(lengths: Union[int, float, Tensor], alpha: float, form: str) -> Union[float, Tensor]:
    """``lp(len)`` of ``form`` (see the module docstring) for hypotheses of
    ``lengths`` tokens (``</s>`` included), with exponent ``alpha``
    (``--lenpen``): ``len ** alpha`` (``fairseq``) or
    ``((5 + len) / 6) ** alpha`` (``gnmt``). A number gives a Python float,
    a tensor a tensor of its floating dtype (float32 for integer lengths)."""
    if form not in LENGTH_PENALTY_FORMS:
        raise ValueError(f"--length-penalty-form must be one of {', '.join(LENGTH_PENALTY_FORMS)}, got {form!r}")
    if torch.is_tensor(lengths):
        lengths = lengths if lengths.is_floating_point() else lengths.float()
        if form == "gnmt":
            return ((5.0 + lengths) / 6.0).pow(alpha)
        return lengths.pow(alpha)
    if form == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    return lengths**alpha


class LengthPenaltySequenceGenerator(SequenceGenerator):
    """fairseq's ``SequenceGenerator`` whose finished hypotheses are scored
    ``log P(Y|X) / lp(len)`` with ``lp`` of ``length_penalty_form``
    (:func:`length_penalty`, exponent ``len_penalty``, i.e. ``--lenpen``).
    The ``fairseq`` form is fairseq's own normalisation, unchanged; with the
    ``gnmt`` form fairseq's division is switched off and
    :meth:`finalize_hypos` divides each hypothesis it finalizes instead
    (its positional scores stay the unnormalised per-token
    log-probabilities, as fairseq keeps them). ``--unnormalized`` (
    ``normalize_scores=False``) leaves every score unnormalised in both
    forms."""

    def __init__(self, models, tgt_dict, length_penalty_form: str = LENGTH_PENALTY_FORMS[0], **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        if length_penalty_form not in LENGTH_PENALTY_FORMS:
            raise ValueError(
                f"--length-penalty-form must be one of {', '.join(LENGTH_PENALTY_FORMS)}, got {length_penalty_form!r}"
            )
        self.length_penalty_form = length_penalty_form
        # whether finalize_hypos divides by lp(len) itself (fairseq's own division then off)
        self.divides_by_length_penalty = length_penalty_form != "fairseq" and self.normalize_scores
        if self.divides_by_length_penalty:
            self.normalize_scores = False

    def finalize_hypos(
        self,
        step: int,
        bbsz_idx,
        eos_scores,
        tokens,
        scores,
        finalized,
        finished,
        beam_size: int,
        attn,
        src_lengths,
        max_len: int,
    ):
        """fairseq's ``finalize_hypos``; with a form other than fairseq's,
        the hypotheses it adds to ``finalized`` (all ``step + 1`` tokens
        long) have their score divided by :func:`length_penalty`."""
        if not self.divides_by_length_penalty:
            return super().finalize_hypos(
                step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
            )
        counts = [len(hypotheses) for hypotheses in finalized]
        newly_finished = super().finalize_hypos(
            step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
        )
        penalty = length_penalty(step + 1, self.len_penalty, self.length_penalty_form)
        for hypotheses, count in zip(finalized, counts):
            for hypothesis in hypotheses[count:]:
                hypothesis["score"] = hypothesis["score"] / penalty
        return newly_finished
