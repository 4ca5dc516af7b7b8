"""Views of a flat, padded source stream as paragraph blocks.

The data contract gives every source token its paragraph index
(``src_para_ids [B, T]``, -1 at padding; paragraphs are contiguous runs in
stream order, which the batch check holds the batch to). :class:`ParagraphBlocks` computes, with vectorized index
arithmetic only, where every token goes in

* the *block* view ``[N, L, d]``: one row per paragraph that has tokens, over
  the whole batch (``N`` = number of real paragraphs, ``L`` = longest), so
  attention inside paragraphs costs ``N * L^2``, and no row is all padding;
* the *paragraph* view ``[B, P, ...]``: one slot per paragraph index, for
  attention across the paragraphs of an example (``P`` = largest paragraph
  count in the batch; a missing paragraph is masked).
"""

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ParagraphBlocks:
    """Index maps between the flat ``[B, T]`` stream and its block views.

    Attributes:
        token_mask: ``[B, T]`` True at real (non-pad) tokens.
        block_of_token: ``[B, T]`` block index of every token (0 at pad).
        position_in_block: ``[B, T]`` 0, 1, 2, ... inside each paragraph.
        block_batch / block_paragraph: ``[N]`` example and paragraph index of
            every block.
        num_paragraphs: ``P``, slots of the paragraph view.
        block_length: ``L``.
    """

    token_mask: Tensor
    block_of_token: Tensor
    position_in_block: Tensor
    block_batch: Tensor
    block_paragraph: Tensor
    num_paragraphs: int
    block_length: int

    @classmethod
    def from_paragraph_ids(cls, paragraph_ids: Tensor, token_mask: Tensor) -> "ParagraphBlocks":
        """``paragraph_ids``: ``[B, T]``, every real token's paragraph, one run
        per paragraph (the data contract's ``src_para_ids``, as the batch check
        passed it: :func:`mdsfair.data.side_inputs.check_side_inputs`);
        ``token_mask``: ``[B, T]`` True at real tokens."""
        batch_size, length = paragraph_ids.shape
        previous = torch.nn.functional.pad(paragraph_ids[:, :-1], (1, 0), value=-1)
        previous_real = torch.nn.functional.pad(token_mask[:, :-1], (1, 0), value=False)
        starts = token_mask & ((paragraph_ids != previous) | ~previous_real)
        block_of_token = (starts.reshape(-1).long().cumsum(0) - 1).view(batch_size, length)
        block_of_token = block_of_token.clamp(min=0).masked_fill(~token_mask, 0)
        token_index = torch.arange(length, device=paragraph_ids.device).expand(batch_size, length)
        batch_index = torch.arange(batch_size, device=paragraph_ids.device).unsqueeze(1).expand(batch_size, length)
        block_start = token_index[starts]
        block_batch = batch_index[starts]
        block_paragraph = paragraph_ids[starts]
        position_in_block = (token_index - block_start[block_of_token]).masked_fill(~token_mask, 0)
        num_blocks = int(block_start.numel())
        block_length = int(position_in_block.max()) + 1 if num_blocks else 0
        num_paragraphs = int(block_paragraph.max()) + 1 if num_blocks else 0
        return cls(
            token_mask=token_mask,
            block_of_token=block_of_token,
            position_in_block=position_in_block,
            block_batch=block_batch,
            block_paragraph=block_paragraph,
            num_paragraphs=num_paragraphs,
            block_length=block_length,
        )

    @property
    def num_blocks(self) -> int:
        return int(self.block_batch.numel())

    def block_padding_mask(self) -> Tensor:
        """``[N, L]`` True at padding of the block view."""
        filled = torch.zeros(self.num_blocks * self.block_length, dtype=torch.bool, device=self.token_mask.device)
        filled[self._flat_block_index()] = True
        return ~filled.view(self.num_blocks, self.block_length)

    def paragraph_mask(self) -> Tensor:
        """``[B, P]`` True where paragraph ``p`` of example ``b`` has tokens."""
        mask = torch.zeros(
            self.token_mask.size(0), self.num_paragraphs, dtype=torch.bool, device=self.token_mask.device
        )
        mask[self.block_batch, self.block_paragraph] = True
        return mask

    def _flat_block_index(self) -> Tensor:
        return (self.block_of_token * self.block_length + self.position_in_block)[self.token_mask]

    def to_blocks(self, x: Tensor) -> Tensor:
        """``[B, T, ...]`` -> ``[N, L, ...]`` (zeros at block padding)."""
        out = x.new_zeros((self.num_blocks * self.block_length,) + tuple(x.shape[2:]))
        out = out.index_put((self._flat_block_index(),), x[self.token_mask])
        return out.view((self.num_blocks, self.block_length) + tuple(x.shape[2:]))

    def to_flat(self, blocks: Tensor) -> Tensor:
        """``[N, L, ...]`` -> ``[B, T, ...]`` (zeros at padding)."""
        feature_shape = tuple(blocks.shape[2:])
        flat_blocks = blocks.reshape((self.num_blocks * self.block_length,) + feature_shape)
        out = blocks.new_zeros(tuple(self.token_mask.shape) + feature_shape)
        return out.index_put((self.token_mask,), flat_blocks[self._flat_block_index()])

    def blocks_to_paragraphs(self, per_block: Tensor) -> Tensor:
        """``[N, ...]`` -> ``[B, P, ...]`` (zeros at missing paragraphs)."""
        out = per_block.new_zeros((self.token_mask.size(0), self.num_paragraphs) + tuple(per_block.shape[1:]))
        return out.index_put((self.block_batch, self.block_paragraph), per_block)

    def paragraphs_to_blocks(self, per_paragraph: Tensor) -> Tensor:
        """``[B, P, ...]`` -> ``[N, ...]``."""
        return per_paragraph[self.block_batch, self.block_paragraph]
