"""DependencyGuidedMultiheadAttention splits and merges heads with the shared
helper (mdsfair.modules.heads) and computes bit for bit what its former
inline head split and merge computed (Eq. 8-11 of the DAPE paper are checked
in tests/test_dape.py)."""

import torch
from fairseq import utils

from mdsfair.modules.dependency_attention import DependencyGuidedMultiheadAttention
from mdsfair.modules.heads import merge_heads, split_heads


def test_merge_heads_inverts_split_heads_in_fairseq_layout():
    length, batch, heads, head_dim = 5, 3, 4, 6
    x = torch.randn(length, batch, heads * head_dim)
    assert torch.equal(merge_heads(split_heads(x, heads)), x)
    per_head = torch.randn(batch, heads, length, head_dim)
    # fairseq: attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim) of [B * H, T, d]
    fairseq_merge = per_head.reshape(batch * heads, length, head_dim).transpose(0, 1).reshape(length, batch, -1)
    assert torch.equal(merge_heads(per_head), fairseq_merge)


def former_forward(attention, query, key_padding_mask, dependency_mask):
    """The forward pass before the shared helper, verbatim but for the names."""
    length, batch_size, embed_dim = query.size()
    heads, head_dim = attention.num_heads, attention.head_dim

    def split(x):
        return x.view(length, batch_size, heads, head_dim).permute(1, 2, 0, 3)

    q = split(attention.q_proj(query) * attention.scaling)
    k, v = split(attention.k_proj(query)), split(attention.v_proj(query))
    scores = torch.matmul(q, k.transpose(-1, -2))
    scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    weights = utils.softmax(scores, dim=-1)
    mask = dependency_mask.to(weights.dtype).unsqueeze(1).masked_fill(key_padding_mask[:, None, None, :], 0.0)
    if attention.mask_on == "weights":
        attn = torch.matmul(weights * mask + weights, v)
    else:
        attn = torch.matmul(weights, v) + torch.matmul(mask, v)
    return attention.out_proj(attn.permute(2, 0, 1, 3).reshape(length, batch_size, embed_dim))


def test_guided_attention_equals_its_former_head_split_exactly():
    torch.manual_seed(0)
    dim, heads, length, batch = 16, 4, 6, 2
    x = torch.randn(length, batch, dim)
    padding = torch.tensor([[False] * 6, [False, False, False, True, True, True]])
    mask = torch.randn(batch, length, length)
    for mask_on in ("weights", "values"):
        attention = DependencyGuidedMultiheadAttention(dim, heads, self_attention=True, mask_on=mask_on).eval()
        with torch.no_grad():
            out, _ = attention(x, x, x, key_padding_mask=padding, dependency_mask=mask)
            assert torch.equal(out, former_forward(attention, x, padding, mask)), mask_on
