"""What mdsfair's static-shape generator tells the fast modules of a model
during one ``generate()``: the history of its in-place self-attention caches
and whether it keeps the attention over the source.

The static-shape generator (:mod:`mdsfair.generation.static_decoding`) keeps
``batch * beam`` rows from the first step to the last, and every reorder
moves a hypothesis only among the ``beam`` rows of its own source. It owns
one :class:`StaticBeamSearch` per model of its ensemble: it reorders and
advances the :class:`BeamHistory` with the search, and hands the object to
the model's fast modules (:class:`FollowsStaticBeamSearch`) for the duration
of one ``generate()`` only (:func:`following_static_beam_search`, cleared in
a ``finally``). Outside it (training, a full forward, fairseq's generator on
the same model) every fast module runs its reference ``forward``.
"""

import contextlib
from typing import Dict, Optional, Sequence

import torch
from torch import Tensor, nn

#: capacity (steps) of a new history and cache, or the generator's length limit if shorter; doubled when
#: full (a summary that ends early never holds memory for the limit)
INITIAL_CAPACITY = 128

#: steps between two looks for newly settled steps (see :meth:`BeamHistory.settle`)
SETTLE_INTERVAL = 16


class BeamHistory:
    """Which row of its source every row's history reads at every cached
    step, shared by all in-place self-attention layers of one decoder.

    ``parents [rows, capacity]``: at step ``s`` row ``r`` reads the cache of
    row ``(r // beam) * beam + parents[r, s]``. Steps not yet reached hold the
    row's own slot (``r % beam``), which is where the row's next step is
    written. ``length``: the steps cached.

    ``settled``: the first steps at which every row of each source reads the
    same slot (beam search's hypotheses share their first words: their
    histories meet there and, since a reorder only copies one row's history
    to another of its source, stay met). The caches keep one key per source
    for a settled step instead of ``beam`` (:meth:`settle`), so the
    attention reads a few more keys than steps instead of ``beam`` times as
    many. Looking for them reads a value on the host, so it is done on the
    CPU only, every :data:`SETTLE_INTERVAL` steps."""

    def __init__(self, rows: int, group_size: int, capacity: int, device):
        if group_size < 1:
            raise ValueError(f"beam size must be at least 1, got {group_size}")
        if rows % group_size:
            raise ValueError(f"{rows} decoder rows do not form groups of {group_size} (the beam size)")
        self.rows, self.group_size, self.capacity = rows, group_size, capacity
        self.parents = self._own_slots(capacity, device)
        self.length = 0
        self.settled = 0
        self.settles = torch.device(device).type == "cpu"
        self._key_bias: Dict[torch.dtype, Tensor] = {}
        self._bias_tables: Dict[torch.dtype, Tensor] = {}

    def _own_slots(self, steps: int, device) -> Tensor:
        return (
            (torch.arange(self.rows, device=device) % self.group_size)
            .unsqueeze(1)
            .expand(self.rows, steps)
            .contiguous()
        )

    def reorder(self, new_order: Tensor) -> None:
        """Row ``r`` continues the hypothesis of row ``new_order[r]`` (of the
        same group): its history becomes that row's."""
        if new_order.numel() != self.rows:
            raise ValueError(
                f"a reorder of {new_order.numel()} rows for a decoder of {self.rows} rows: "
                "a static beam search keeps the number of rows"
            )
        if self.length:
            self.parents[:, : self.length] = self.parents[:, : self.length].index_select(0, new_order)
        self._key_bias = {}

    def ensure_capacity(self, steps: int) -> None:
        if steps > self.capacity:
            grown = max(steps, 2 * self.capacity)
            parents = self._own_slots(grown, self.parents.device)
            parents[:, : self.length] = self.parents[:, : self.length]
            self.parents, self.capacity = parents, grown
            self._key_bias = {}

    def advance(self) -> None:
        """One step more is cached (after every layer has written it)."""
        self.ensure_capacity(self.length + 1)
        self.length += 1
        self._key_bias = {}
        if self.settles and self.length % SETTLE_INTERVAL == 0:
            self.settle()

    def settle(self) -> None:
        """Extend :attr:`settled` over the steps after it at which every
        row of every source reads one slot of its source (the fewest such
        steps over the sources: one layout for all)."""
        beam = self.group_size
        live = self.parents[:, self.settled : self.length].view(self.rows // beam, beam, -1)
        shared = live.eq(live[:, :1]).all(dim=1)  # [B, steps]
        self.settled += int(shared.long().cumprod(dim=1).sum(dim=1).min())
        self._key_bias = {}

    def settled_slots(self, first: int, last: int) -> Tensor:
        """``[B, last - first]``: the slot that every row of each source
        reads at the settled steps ``first .. last - 1``."""
        return self.parents[:: self.group_size, first:last]

    def cached_keys(self, steps: int) -> int:
        """How many keys a cache holds for ``steps`` steps: one per settled
        step, ``beam`` per step after them."""
        return self.settled + (steps - self.settled) * self.group_size

    def key_bias(self, dtype: torch.dtype) -> Tensor:
        """The additive attention mask of this step's keys (``length + 1``
        steps: one key per :attr:`settled` step, then every beam row's),
        shared by all layers: ``[B, 1, j, settled + (t - settled) * beam]``
        in ``dtype``; 0 at the settled keys (in every row's history), and at
        ``(b, j, settled + (s - settled) * beam + c)`` 0 where beam row
        ``c``'s key at step ``s`` is in row ``j``'s history and -inf where
        it is not. Looked up in a ``[beam, beam]`` table (0 on the diagonal,
        -inf off it) at the parents of every row and step, once per step
        and dtype."""
        bias = self._key_bias.get(dtype)
        if bias is None:
            steps, beam, settled = self.length + 1, self.group_size, self.settled
            self.ensure_capacity(steps)
            table = self._bias_tables.get(dtype)
            if table is None:
                table = torch.full((beam, beam), float("-inf"), dtype=dtype, device=self.parents.device)
                table = self._bias_tables[dtype] = table.fill_diagonal_(0.0)
            # [rows * capacity, beam] -> [B, 1, j, capacity * beam], the keys of steps settled .. steps - 1 (a view)
            looked_up = table.index_select(0, self.parents.view(-1))
            bias = looked_up.as_strided(
                (self.rows // beam, 1, beam, (steps - settled) * beam),
                (beam * self.capacity * beam, 0, self.capacity * beam, 1),
                settled * beam,
            )
            if settled:
                bias = torch.cat([bias.new_zeros(bias.shape[:-1] + (settled,)), bias], dim=-1)
            self._key_bias[dtype] = bias
        return bias


class StaticBeamSearch:
    """One model's side of one static-shape beam search: ``rows`` decoder
    rows in groups of ``beam_size`` (a source's beam), at most ``max_steps``
    decoder calls expected (the caches start with at most that capacity and
    grow by doubling), and whether the generator keeps the attention over
    the source (``keep_attention``; without it the decoder layers compute
    none)."""

    def __init__(
        self, rows: int, beam_size: int, max_steps: Optional[int] = None, device=None, keep_attention: bool = False
    ):
        capacity = min(max_steps or INITIAL_CAPACITY, INITIAL_CAPACITY)
        self.history = BeamHistory(rows, beam_size, capacity, torch.device("cpu") if device is None else device)
        self.keep_attention = keep_attention

    def reorder(self, new_order: Tensor) -> None:
        """The generator's reorder of the rows (see :meth:`BeamHistory.reorder`)."""
        self.history.reorder(new_order)

    def advance(self) -> None:
        """After each decoder call: one step more is cached."""
        self.history.advance()


class FollowsStaticBeamSearch:
    """A fast module that speeds up the steps of a static beam search: its
    :attr:`static_beam_search` is the generator's :class:`StaticBeamSearch`
    during one ``generate()`` (:func:`following_static_beam_search`), None
    otherwise, when the module computes as its reference class does."""

    static_beam_search: Optional[StaticBeamSearch] = None

    def in_static_step(self, incremental_state) -> bool:
        """Whether this call is a step of a static beam search: a search is
        followed, the decoder runs incrementally, without autograd and in
        evaluation mode."""
        return (
            self.static_beam_search is not None
            and incremental_state is not None
            and not self.training
            and not torch.is_grad_enabled()
        )


@contextlib.contextmanager
def following_static_beam_search(models: Sequence[nn.Module], searches: Sequence[StaticBeamSearch]):
    """Hand ``searches[i]`` to every :class:`FollowsStaticBeamSearch` module
    of ``models[i]`` for the duration of the block; afterwards (also after
    an error) no module follows a search any more, so no stale history can
    reach a later generation."""
    if len(models) != len(searches):
        raise ValueError(f"{len(searches)} beam searches for {len(models)} models")
    followers = [
        (module, search)
        for model, search in zip(models, searches)
        for module in model.modules()
        if isinstance(module, FollowsStaticBeamSearch)
    ]
    try:
        for module, search in followers:
            module.static_beam_search = search
        yield
    finally:
        for module, _ in followers:
            module.static_beam_search = None
