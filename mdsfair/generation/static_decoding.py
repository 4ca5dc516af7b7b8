"""Beam search with a fixed batch x beam shape: the generator mdsfair's
task builds by default wherever it gives fairseq's beams
(:func:`~mdsfair.generation.sequence_generator.choose_generator`;
``--static-decoding`` insists on it, ``--fairseq-generator`` chooses
fairseq's).

fairseq's ``SequenceGenerator`` removes a source from the batch as soon as
its ``beam`` hypotheses are finished: every tensor of the step, the encoder
output and every decoder cache change their number of rows, so no step has
the shape of the one before, and every step reorders the whole encoder
output. :class:`StaticShapeSequenceGenerator` runs the same beam search with
the shape fixed from the first step to the last:

* a finished source keeps its ``beam`` rows as padding: they are decoded
  with the others and never finalize anything again (their end-of-sentence
  candidates are masked), so the finalized hypotheses are those of
  fairseq's generator;
* the encoder output is expanded to ``batch * beam`` rows once and never
  reordered: beam search only moves a row within its own source's rows,
  and the encoder output's rows of one source are the same (per-source
  caches such as the sparse cross-attention's then keep one row layout for
  the whole generation, :class:`~mdsfair.modules.hypothesis_rows.HypothesisRows`
  ``blocked``); the decoder's own caches are reordered as before, except
  mdsfair's self-attention caches, which stay in place and follow their
  hypotheses through one small table, the generator's
  :class:`~mdsfair.generation.fast.static_beam_search.BeamHistory`
  (:mod:`mdsfair.generation.fast.beam_cached_self_attention`);
* the hypotheses' attention over the source (fairseq keeps a
  ``[rows, source, steps]`` table and copies it at every reorder, a cost
  that grows with the summary) is kept only with ``keep_attention``: the
  alignment it serves (``--print-alignment``) is left to fairseq's
  generator, and a hypothesis then carries an empty ``attention`` tensor, as
  fairseq's does for a model without attention; mdsfair's decoder layers
  are told so and do not compute it;
* beam search (fairseq's ``BeamSearch``, the default strategy) takes its
  ``2 * beam`` candidates per source in two stages (:func:`beam_candidates`):
  the best of every row, then the best of those, instead of adding every
  row's score to all its ``vocabulary`` log-probabilities and ranking
  ``beam * vocabulary`` sums; the same candidates with the same scores;
* with ``bucket_sizes`` (``--static-decoding-buckets``), the batch is padded
  to the smallest bucket that holds it (its last source repeated, finished
  from the start), so that batches of different sizes share a few shapes.

The generator puts the decoding speed-ups of :mod:`mdsfair.generation.fast`
in its models once, at construction (:func:`~mdsfair.generation.fast.make_generation_fast_`:
the in-place self-attention cache, the transposed step products, the
components' fast generation steps), and owns one
:class:`~mdsfair.generation.fast.static_beam_search.StaticBeamSearch` per
model for each ``generate()``: it reorders and advances its history with
the search and hands it to the models' fast modules for that call only
(:func:`~mdsfair.generation.fast.static_beam_search.following_static_beam_search`);
outside it those modules compute as their reference classes.

On CPU the step runs eagerly with these shapes. The best beams equal
fairseq's generator's (``tests/test_static_decoding.py``, float64, every
generating architecture).
"""

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from fairseq.models import FairseqIncrementalDecoder
from fairseq.search import BeamSearch
from torch import Tensor

from mdsfair.generation.fast import make_generation_fast_
from mdsfair.generation.fast.static_beam_search import StaticBeamSearch, following_static_beam_search
from mdsfair.generation.length_penalty import LengthPenaltySequenceGenerator


def bucket_size(batch_size: int, bucket_sizes: Optional[Sequence[int]]) -> int:
    """The smallest of ``bucket_sizes`` that holds ``batch_size`` sources
    (``batch_size`` itself without buckets or above the largest)."""
    if not bucket_sizes:
        return batch_size
    fitting = [size for size in bucket_sizes if size >= batch_size]
    return min(fitting) if fitting else batch_size


def parse_bucket_sizes(text: Optional[str]) -> List[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]``; empty or None: no buckets."""
    if text is None or not str(text).strip():
        return []
    try:
        sizes = sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--static-decoding-buckets must be comma-separated batch sizes, got {text!r}") from None
    if sizes and sizes[0] < 1:
        raise ValueError(f"--static-decoding-buckets sizes must be at least 1, got {text!r}")
    return sizes


def pad_rows(tensor: Tensor, rows: int) -> Tensor:
    """``tensor`` with its last row (dimension 0) repeated up to ``rows``."""
    missing = rows - tensor.size(0)
    if missing <= 0:
        return tensor
    return torch.cat([tensor, tensor[-1:].expand(missing, *tensor.shape[1:])], dim=0)


#: values per block of :func:`row_top_k`'s first pass (the fastest of 32-2,048 over BART's 50,265 words on CPU)
TOP_K_BLOCK = 64


def row_top_k(values: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """``torch.topk(values, k, dim=-1)`` (the ``k`` largest values of every
    row and their indices, largest first) for rows without NaN.

    On a CPU, where ``torch.topk`` over a 50,265-word row costs about 20
    times a pass that only reads it, a long row is ranked in two passes:
    the maxima of its blocks of :data:`TOP_K_BLOCK` values, then the values
    of the ``k`` blocks with the largest maxima (and of the last, partial
    block). These hold the row's ``k`` largest values: if one of them, ``v``,
    lies in another block, the chosen blocks' ``k`` maxima are each at least
    that block's maximum, so at least ``v``; the candidates then hold ``k``
    values at least as large as any value they miss. The values are
    ``torch.topk``'s; among equal values the indices may be others (as
    ``torch.topk``, which specifies no order for ties). Short rows and other
    devices take ``torch.topk`` itself."""
    size = values.size(-1)
    blocks = size // TOP_K_BLOCK
    if values.device.type != "cpu" or blocks < 4 * k or values.stride(-1) != 1:
        return torch.topk(values, k, dim=-1)
    lead = values.shape[:-1]
    rows = values.reshape(-1, size)
    num_rows, whole = rows.size(0), blocks * TOP_K_BLOCK
    maxima = rows[:, :whole].view(num_rows, blocks, TOP_K_BLOCK).amax(dim=-1)
    best_blocks = maxima.topk(k, dim=-1).indices  # [rows, k]
    offsets = torch.arange(TOP_K_BLOCK, device=values.device)
    candidates = torch.add(offsets, best_blocks.unsqueeze(-1), alpha=TOP_K_BLOCK).view(num_rows, k * TOP_K_BLOCK)
    if whole < size:  # the partial last block: always a candidate
        tail = torch.arange(whole, size, device=values.device).expand(num_rows, size - whole)
        candidates = torch.cat([candidates, tail], dim=1)
    top_values, where = rows.gather(1, candidates).topk(k, dim=-1)
    return top_values.view(*lead, k), candidates.gather(1, where).view(*lead, k)


def beam_candidates(step: int, lprobs: Tensor, scores: Tensor, candidate_multiple: int = 2):
    """fairseq's ``BeamSearch.step`` for ``lprobs [bsz, beam, V]`` and the
    hypotheses' ``scores [bsz, beam, steps]``: the ``candidate_multiple *
    beam`` best continuations of each source, as ``(scores, tokens, beams)``,
    each ``[bsz, k]``, best first.

    fairseq adds every row's score to its ``V`` log-probabilities and ranks
    the ``beam * V`` sums of a source. A continuation among a source's ``k``
    best is among the ``k`` best of its own row (the row's score is added to
    all of them), so the rows' ``k`` best are ranked instead: the same
    candidates, with the same sums (the same two numbers added), reading the
    log-probabilities once and adding ``beam * k`` scores. As fairseq, the
    first step ranks the first row only (every row of a source is the same
    empty hypothesis) and at most ``beam * V - 1`` candidates are taken
    (never the padding symbol). Equal sums may come in another order
    (neither ranking specifies one)."""
    bsz, beam_size, vocab_size = lprobs.shape
    if step == 0:
        k = min(candidate_multiple * beam_size, vocab_size - 1)
        cand_scores, cand_indices = row_top_k(lprobs[:, 0, :], k)
        return cand_scores, cand_indices, torch.zeros_like(cand_indices)
    k = min(candidate_multiple * beam_size, beam_size * vocab_size - 1)
    per_row = min(k, vocab_size)
    row_scores, row_indices = row_top_k(lprobs, per_row)  # [bsz, beam, per_row]
    sums = row_scores.add_(scores[:, :, step - 1].unsqueeze(-1)).view(bsz, beam_size * per_row)
    cand_scores, flat = torch.topk(sums, k)
    cand_beams = torch.div(flat, per_row, rounding_mode="trunc")
    return cand_scores, row_indices.view(bsz, beam_size * per_row).gather(1, flat), cand_beams


def decoder_state_reorders(model) -> List[Callable]:
    """One function per member of fairseq's ``EnsembleModel`` that reorders
    its decoder's incremental state, as ``reorder_incremental_state`` does
    (nothing without incremental states). fairseq's
    ``reorder_incremental_state_scripting`` walks the decoder's modules at
    every step to find those with a ``reorder_incremental_state``; a
    generation's modules do not change, so they are found once here and
    called in the same order, each given the state the one before returned.
    A decoder with its own ``reorder_incremental_state_scripting`` keeps it."""
    if not model.has_incremental_states():
        return []
    walk = FairseqIncrementalDecoder.reorder_incremental_state_scripting
    reorders = []
    for member in model.models:
        decoder = member.decoder
        if type(decoder).reorder_incremental_state_scripting is not walk:
            reorders.append(decoder.reorder_incremental_state_scripting)
            continue
        modules = [module for module in decoder.modules() if hasattr(module, "reorder_incremental_state")]

        def reorder(incremental_state, new_order, modules=modules):
            for module in modules:
                result = module.reorder_incremental_state(incremental_state, new_order)
                if result is not None:
                    incremental_state = result

        reorders.append(reorder)
    return reorders


class StaticShapeSequenceGenerator(LengthPenaltySequenceGenerator):
    """fairseq's beam search (n-gram blocking, prefix tokens, length limits
    and penalties, diverse siblings) with fixed shapes; see the module
    docstring. Finished hypotheses are scored by the base class's
    ``finalize_hypos`` (``--length-penalty-form``,
    :mod:`mdsfair.generation.length_penalty`), as in fairseq's generator. Lexical constraints resize the search state per source and
    are refused; the task hands the settings this generator does not cover
    to fairseq's (:func:`~mdsfair.generation.sequence_generator.fairseq_generator_reason`)."""

    def __init__(
        self, models, tgt_dict, bucket_sizes: Optional[Sequence[int]] = None, keep_attention: bool = False, **kwargs
    ):
        super().__init__(models, tgt_dict, **kwargs)
        self.bucket_sizes = sorted(bucket_sizes) if bucket_sizes else []
        self.keep_attention = keep_attention
        for model in self.model.models:
            make_generation_fast_(model)

    @torch.no_grad()
    def _generate(
        self,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        bos_token: Optional[int] = None,
    ):
        if constraints is not None:
            raise ValueError(
                "--static-decoding does not support lexical constraints (--constraints): "
                "they resize the search per source; generate without --static-decoding"
            )
        net_input = sample["net_input"]
        if "src_tokens" not in net_input:
            raise ValueError(f"--static-decoding needs src_tokens in the net input, got {sorted(net_input)}")
        num_sources = net_input["src_tokens"].size(0)
        bsz = bucket_size(num_sources, self.bucket_sizes)
        if bsz > num_sources:  # the bucket's extra sources: copies of the last, finished from the start
            net_input = {
                name: pad_rows(value, bsz)
                if torch.is_tensor(value) and value.dim() > 0 and value.size(0) == num_sources
                else value
                for name, value in net_input.items()
            }
            if prefix_tokens is not None:
                prefix_tokens = pad_rows(prefix_tokens, bsz)
        src_tokens = net_input["src_tokens"]
        if "src_lengths" in net_input:
            src_lengths = net_input["src_lengths"]
        else:
            src_lengths = (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(dim=1)
        src_len = src_tokens.size(1)
        beam_size = self.beam_size
        self.search.init_constraints(None, beam_size)
        if self.match_source_len:
            max_len = int(src_lengths.max().item())
        else:
            max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise ValueError("min_len cannot be larger than max_len, please adjust these!")

        incremental_states = [{} for _ in range(self.model.models_size)]
        # reorders stay within a source's rows (see below); each model's fast modules follow its search
        searches = [
            StaticBeamSearch(bsz * beam_size, beam_size, max_len + 2, src_tokens.device, self.keep_attention)
            for _ in range(self.model.models_size)
        ]
        with following_static_beam_search(self.model.models, searches):
            return self._search(
                sample,
                net_input,
                prefix_tokens,
                bos_token,
                num_sources,
                bsz,
                src_lengths,
                max_len,
                incremental_states,
                searches,
            )

    def _search(
        self,
        sample,
        net_input,
        prefix_tokens,
        bos_token,
        num_sources: int,
        bsz: int,
        src_lengths: Tensor,
        max_len: int,
        incremental_states: List[Dict],
        searches: List[StaticBeamSearch],
    ):
        """The beam search of :meth:`_generate` (see the module docstring),
        while the models' fast modules follow ``searches``."""
        src_tokens = net_input["src_tokens"]
        beam_size = self.beam_size
        with torch.autograd.profiler.record_function("EnsembleModel: forward_encoder"):
            encoder_outs = self.model.forward_encoder(net_input)
        new_order = torch.arange(bsz).view(-1, 1).repeat(1, beam_size).view(-1).to(src_tokens.device).long()
        # once: from here on every row reads the same source
        encoder_outs = self.model.reorder_encoder_out(encoder_outs, new_order)

        scores = torch.zeros(bsz * beam_size, max_len + 1).to(src_tokens).float()
        tokens = torch.zeros(bsz * beam_size, max_len + 2).to(src_tokens).long().fill_(self.pad)
        tokens[:, 0] = self.eos if bos_token is None else bos_token
        attn: Optional[Tensor] = None
        cands_to_ignore = torch.zeros(bsz, beam_size).to(src_tokens).eq(-1)
        finalized: List[List[Dict[str, Tensor]]] = [[] for _ in range(bsz)]
        finished = [index >= num_sources for index in range(bsz)]
        finished_sources = torch.tensor(finished, device=src_tokens.device)
        num_remaining = num_sources
        cand_size = 2 * beam_size
        bbsz_offsets = (torch.arange(0, bsz) * beam_size).unsqueeze(1).type_as(tokens).to(src_tokens.device)
        cand_offsets = torch.arange(0, cand_size).type_as(tokens).to(src_tokens.device)
        if "id" in sample and isinstance(sample["id"], Tensor):
            original_batch_idxs = pad_rows(sample["id"], bsz)
        else:
            original_batch_idxs = torch.arange(0, bsz).type_as(tokens)

        reorder_state: Optional[Tensor] = None
        state_reorders = decoder_state_reorders(self.model)
        for step in range(max_len + 1):  # one extra step for the end of sentence
            if reorder_state is not None:
                # the decoder's caches follow their hypotheses; the encoder output stays (see above)
                for search in searches:
                    search.reorder(reorder_state)
                for reorder, incremental_state in zip(state_reorders, incremental_states):
                    reorder(incremental_state, reorder_state)
            with torch.autograd.profiler.record_function("EnsembleModel: forward_decoder"):
                lprobs, avg_attn_scores = self.model.forward_decoder(
                    tokens[:, : step + 1], encoder_outs, incremental_states, self.temperature
                )
            for search in searches:
                search.advance()
            if self.lm_model is not None:
                lm_out = self.lm_model(tokens[:, : step + 1])
                probs = self.lm_model.get_normalized_probs(lm_out, log_probs=True, sample=None)
                lprobs += probs[:, -1, :] * self.lm_weight

            # fairseq's lprobs[lprobs != lprobs] = -inf: one pass, no host read (+-inf stay as they are)
            lprobs.nan_to_num_(nan=-math.inf, posinf=math.inf, neginf=-math.inf)
            lprobs[:, self.pad] = -math.inf
            lprobs[:, self.unk] -= self.unk_penalty
            if step >= max_len:
                lprobs[:, : self.eos] = -math.inf
                lprobs[:, self.eos + 1 :] = -math.inf
            if prefix_tokens is not None and step < prefix_tokens.size(1) and step < max_len:
                lprobs, tokens, scores = self._prefix_tokens(step, lprobs, scores, tokens, prefix_tokens, beam_size)
            else:
                if step < self.min_len:
                    lprobs[:, self.eos] = -math.inf
                if self.token_indices_to_suppress is not None:
                    lprobs[:, self.token_indices_to_suppress] = -math.inf

            if avg_attn_scores is not None and self.keep_attention:
                if attn is None:
                    attn = torch.empty(bsz * beam_size, avg_attn_scores.size(1), max_len + 2).to(scores)
                attn[:, :, step + 1].copy_(avg_attn_scores)
            scores = scores.type_as(lprobs)
            if self.should_set_src_lengths:
                self.search.set_src_lengths(src_lengths)
            if self.repeat_ngram_blocker is not None:
                lprobs = self.repeat_ngram_blocker(tokens, lprobs, bsz, beam_size, step)

            if type(self.search) is BeamSearch:
                cand_scores, cand_indices, cand_beams = beam_candidates(
                    step, lprobs.view(bsz, -1, self.vocab_size), scores.view(bsz, beam_size, -1)
                )
            else:
                cand_scores, cand_indices, cand_beams = self.search.step(
                    step,
                    lprobs.view(bsz, -1, self.vocab_size),
                    scores.view(bsz, beam_size, -1)[:, :, :step],
                    tokens[:, : step + 1],
                    original_batch_idxs,
                )
            cand_bbsz_idx = cand_beams.add(bbsz_offsets)
            eos_mask = cand_indices.eq(self.eos) & cand_scores.ne(-math.inf)
            eos_mask[:, :beam_size][cands_to_ignore] = torch.tensor(0).to(eos_mask)
            # a finished source (or a bucket's padding) finalizes nothing more: its rows are padding
            eos_mask.masked_fill_(finished_sources.unsqueeze(1), False)
            eos_bbsz_idx = torch.masked_select(cand_bbsz_idx[:, :beam_size], mask=eos_mask[:, :beam_size])

            if eos_bbsz_idx.numel() > 0:
                eos_scores = torch.masked_select(cand_scores[:, :beam_size], mask=eos_mask[:, :beam_size])
                # no source ever leaves the batch: the row index is the source index, which
                # fairseq's finalize_hypos reads from a list of finished sources (all unfinished here)
                newly_finished = self.finalize_hypos(
                    step,
                    eos_bbsz_idx,
                    eos_scores,
                    tokens,
                    scores,
                    finalized,
                    [False] * bsz,
                    beam_size,
                    attn,
                    src_lengths,
                    max_len,
                )
                if newly_finished:
                    for source in newly_finished:
                        finished[source] = True
                    finished_sources[torch.tensor(newly_finished, device=finished_sources.device)] = True
                    num_remaining -= len(newly_finished)
            if num_remaining == 0:
                break
            if self.search.stop_on_max_len and step >= max_len:
                break
            if step >= max_len:
                raise RuntimeError(f"beam search ran past its length limit ({step} >= {max_len})")

            eos_mask[:, :beam_size] = ~((~cands_to_ignore) & (~eos_mask[:, :beam_size]))
            active_mask = torch.add(eos_mask.type_as(cand_offsets) * cand_size, cand_offsets[: eos_mask.size(1)])
            new_cands_to_ignore, active_hypos = torch.topk(active_mask, k=beam_size, dim=1, largest=False)
            cands_to_ignore = new_cands_to_ignore.ge(cand_size)[:, :beam_size]
            active_bbsz_idx = torch.gather(cand_bbsz_idx, dim=1, index=active_hypos).view(-1)
            tokens[:, : step + 1] = torch.index_select(tokens[:, : step + 1], dim=0, index=active_bbsz_idx)
            tokens.view(bsz, beam_size, -1)[:, :, step + 1] = torch.gather(cand_indices, dim=1, index=active_hypos)
            if step > 0:
                scores[:, :step] = torch.index_select(scores[:, :step], dim=0, index=active_bbsz_idx)
            scores.view(bsz, beam_size, -1)[:, :, step] = torch.gather(cand_scores, dim=1, index=active_hypos)
            self.search.update_constraints(active_hypos)
            if attn is not None:
                attn[:, :, : step + 2] = torch.index_select(attn[:, :, : step + 2], dim=0, index=active_bbsz_idx)
            reorder_state = active_bbsz_idx

        for source in range(num_sources):  # best first, as fairseq's generator returns them
            order = torch.tensor([float(hypothesis["score"].item()) for hypothesis in finalized[source]])
            finalized[source] = [finalized[source][index] for index in torch.sort(order, descending=True).indices]
        return finalized[:num_sources]
