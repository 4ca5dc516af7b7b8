"""The one head-split helper (mdsfair.modules.heads) has fairseq
MultiheadAttention's layout, and the attentions that use it still compute
what fairseq's attention does (their own tests check their equations)."""

import pytest
import torch
from fairseq.modules import MultiheadAttention

from mdsfair.modules.heads import from_heads, split_heads, to_heads


def test_split_heads_is_fairseq_multihead_attention_layout():
    length, batch, heads, head_dim = 5, 3, 4, 6
    x = torch.randn(length, batch, heads * head_dim)
    # fairseq/modules/multihead_attention.py: q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    fairseq_layout = x.contiguous().view(length, batch * heads, head_dim).transpose(0, 1)
    assert torch.equal(split_heads(x, heads).reshape(batch * heads, length, head_dim), fairseq_layout)
    assert torch.equal(to_heads(x, heads)[:, :, 2], x[:, :, 2 * head_dim : 3 * head_dim])
    assert torch.equal(from_heads(to_heads(x, heads)), x)
    with pytest.raises(ValueError, match="25 channels do not split into 4 heads"):
        to_heads(torch.zeros(2, 25), 4)


def test_document_blocked_attention_with_one_document_equals_fairseq_attention():
    from mdsfair.modules.document_blocked_attention import DocumentBlockedSelfAttention

    torch.manual_seed(0)
    embed_dim, heads, length, batch = 16, 4, 7, 2
    reference = MultiheadAttention(embed_dim, heads, self_attention=True).eval()
    ours = DocumentBlockedSelfAttention(embed_dim, heads, self_attention=True).eval()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(length, batch, embed_dim)
    query, key, value = ours._project(x)
    expected_q = reference.q_proj(x) * reference.scaling
    assert torch.allclose(query, split_heads(expected_q, heads).transpose(1, 2))  # [B, T, H, d]
    context = torch.softmax(torch.einsum("bthd,bshd->bhts", query, key), -1)
    out = ours._output(torch.einsum("bhts,bshd->bthd", context, value))
    expected, _ = reference(x, x, x, need_weights=False)
    assert torch.allclose(out, expected, atol=1e-6)
