"""HierEncDec's blocked document attention on mixed batches (Shen et al.,
2023, Sec. 4.1): the length buckets of the blocks give the numbers of the
dense reference (float64, values and gradients), and a batch costs what its
documents cost, not its most documents times its longest document."""

import pytest
import torch

from mdsfair.modules.document_blocked_attention import DocumentBlockedSelfAttention, document_attention_mask
from mdsfair.modules.document_blocks import DocumentLayout


def document_ids_of(*examples, length=None, left_padding=False):
    """``[B, T]`` ids of examples given as lists of document lengths, padded
    with -1 to ``length`` (default: the longest example) on the right, or on
    the left."""
    rows = [[index for index, size in enumerate(sizes) for _ in range(size)] for sizes in examples]
    length = max(len(row) for row in rows) if length is None else length
    padded = [[-1] * (length - len(row)) + row if left_padding else row + [-1] * (length - len(row)) for row in rows]
    return torch.tensor(padded)


MIXED_BATCHES = {
    "one long document and many short ones": document_ids_of([3, 2, 5, 4, 1, 3, 2, 6, 2, 3], [37]),
    "left padding": document_ids_of([3, 2, 5, 4, 1, 3], [30, 2], left_padding=True),
    "an example of one document among many": document_ids_of([9, 1, 17, 4], [2], [5, 5, 5, 5, 5, 5]),
    "batch of one, every bucket": document_ids_of([1, 2, 3, 5, 9, 17, 33]),
    "batch of one, one document": document_ids_of([12]),
    "no padding": document_ids_of([20, 4], [4, 20]),
    # more documents than most of them have tokens: the SOD rows are recomputed after the blocks
    "many documents shorter than their count": document_ids_of([2] * 12 + [3] * 6 + [1], [40], [5, 1]),
}


def run(attention, implementation, x, layout):
    attention.implementation = implementation
    attention.zero_grad()
    x = x.clone().requires_grad_(True)
    out, _ = attention.forward_documents(x, layout)
    valid = layout.document_ids.t().ge(0).unsqueeze(-1)
    (out * valid).pow(2).sum().backward()
    return out.detach(), x.grad, attention.q_proj.weight.grad.clone(), attention.v_proj.bias.grad.clone()


@pytest.mark.parametrize("shortest_bucket", [1, 4, 16])
@pytest.mark.parametrize("batch", sorted(MIXED_BATCHES))
def test_bucketed_blocks_equal_dense_in_float64(batch, shortest_bucket):
    document_ids = MIXED_BATCHES[batch]
    torch.manual_seed(0)
    attention = DocumentBlockedSelfAttention(16, 2, self_attention=True).double().eval()
    layout = DocumentLayout.from_document_ids(document_ids, shortest_bucket=shortest_bucket)
    x = torch.randn(document_ids.size(1), document_ids.size(0), 16, dtype=torch.float64)
    blocked, dense = run(attention, "blocked", x, layout), run(attention, "dense", x, layout)
    for name, a, b in zip(("output", "input gradient", "q_proj gradient", "v_proj gradient"), blocked, dense):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=f"{batch}: {name}")


def test_every_document_is_one_block_of_its_length_bucket():
    document_ids = MIXED_BATCHES["batch of one, every bucket"]  # documents of 1, 2, 3, 5, 9, 17, 33 tokens
    layout = DocumentLayout.from_document_ids(document_ids, shortest_bucket=4)
    # buckets: up to 4 tokens (three documents), 5-8, 9-16, 17-32, and the longest document's 33
    assert layout.buckets == ((3, 4), (1, 8), (1, 16), (1, 32), (1, 33))
    assert [bucket.tolist() for bucket in layout.bucket_documents] == [[0, 1, 2], [3], [4], [5], [6]]
    assert layout.document_lengths.tolist() == [[1, 2, 3, 5, 9, 17, 33]]
    # every token reads back its own slot: document d's first slot plus its offset
    first_slots = [0, 4, 8, 12, 20, 36, 68]
    expected = [first_slots[d] + offset for d, size in enumerate([1, 2, 3, 5, 9, 17, 33]) for offset in range(size)]
    assert layout.unblock_index.tolist() == expected
    starts = document_ids[0].ne(torch.nn.functional.pad(document_ids[0, :-1], (1, 0), value=-1)).nonzero().view(-1)
    assert layout.sod_token_rows.tolist() == starts.tolist()


def test_the_sod_keys_ride_in_the_blocks_only_where_they_at_most_double_them():
    assert DocumentLayout.from_document_ids(MIXED_BATCHES["no padding"]).sod_keys_in_blocks
    many_short = MIXED_BATCHES["many documents shorter than their count"]
    assert not DocumentLayout.from_document_ids(many_short).sod_keys_in_blocks


def test_missing_documents_have_no_block():
    document_ids = document_ids_of([3, 3, 3], [2])
    layout = DocumentLayout.from_document_ids(document_ids)
    assert layout.document_lengths.tolist() == [[3, 3, 3], [2, 0, 0]]
    assert layout.buckets == ((4, 3),)  # four documents, the longest three tokens
    assert layout.bucket_documents[0].tolist() == [0, 1, 2, 3]


def attention_scores(layout: DocumentLayout) -> int:
    """Scores per head of the blocked attention: every block's slots times
    its keys, and the SOD rows' D * T per example when recomputed."""
    if layout.sod_keys_in_blocks:
        return sum(
            documents * block_length * (block_length + layout.num_documents)
            for documents, block_length in layout.buckets
        )
    batch_size, length = layout.document_ids.shape
    return (
        sum(documents * block_length * block_length for documents, block_length in layout.buckets)
        + batch_size * layout.num_documents * length
    )


def test_a_mixed_batch_costs_what_its_documents_cost():
    """A batch of one cluster of 250 ten-token documents and one of a
    single 1,000-token document. Padding every block to the batch's most
    documents times its longest document would cost B * D * L * (L + D)
    scores per head; the buckets cost at most m * (m + D), m = max(2n, S),
    per document of n tokens, below the dense T^2 per example."""
    short, long_document = [10] * 250, 1000
    document_ids = document_ids_of(short, [long_document])
    batch_size, length = document_ids.shape
    layout = DocumentLayout.from_document_ids(document_ids)
    documents = layout.num_documents
    assert layout.buckets == ((250, 16), (1, 1000))
    widths = [max(2 * n, DocumentLayout.SHORTEST_BUCKET) for n in short + [long_document]]
    bound = sum(m * (m + documents) for m in widths)
    assert attention_scores(layout) <= bound
    assert attention_scores(layout) < batch_size * length * length
    assert attention_scores(layout) * 100 < batch_size * documents * long_document * (long_document + documents)


@pytest.mark.parametrize("batch", ["left padding", "many documents shorter than their count"])
def test_the_dense_mask_and_the_buckets_agree_on_who_sees_whom(batch):
    """Perturbing one token changes exactly the outputs the rule lets see it
    (blocks in several buckets; padding on the left; SOD rows recomputed
    after the blocks)."""
    document_ids = MIXED_BATCHES[batch]
    torch.manual_seed(1)
    attention = DocumentBlockedSelfAttention(16, 2, self_attention=True).double().eval()
    layout = DocumentLayout.from_document_ids(document_ids, shortest_bucket=2)
    assert len(layout.buckets) > 2
    x = torch.randn(document_ids.size(1), document_ids.size(0), 16, dtype=torch.float64)
    reference, _ = attention.forward_documents(x, layout)
    allowed = document_attention_mask(document_ids)
    valid = document_ids.ge(0)
    for b in range(document_ids.size(0)):
        for p in valid[b].nonzero().view(-1).tolist():
            perturbed = x.clone()
            perturbed[p, b] += 1.0
            out, _ = attention.forward_documents(perturbed, layout)
            changed = (out - reference).abs().amax(dim=-1).gt(1e-12)
            expected = torch.zeros_like(changed)
            expected[:, b] = allowed[b, :, p] & valid[b]
            assert torch.equal(changed, expected), (b, p)
