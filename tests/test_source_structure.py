"""The one host read of a batch's structure (:class:`mdsfair.modules.source_structure.SourceStructure`):
the values asked for, the requested values and the pending checks, whatever their dtypes and sizes."""

import pytest
import torch

from mdsfair.modules.source_structure import SourceStructure


def structure():
    tokens = torch.tensor([[5, 6, 1]])
    return SourceStructure(tokens, tokens.eq(1), {})


def test_one_read_gives_every_element_of_the_values_in_order_and_the_requested_values():
    batch = structure()
    batch.request("has_pads", batch.padding_mask.any())
    batch.check(torch.tensor(False), "never refused")
    values = (
        torch.tensor(3),
        torch.tensor([4, 5, 6]),
        torch.tensor(True),
        torch.tensor([[7], [8]], dtype=torch.int32),
        torch.zeros(0, dtype=torch.int64),
    )
    assert batch.read(*values) == [3, 4, 5, 6, 1, 7, 8]
    assert batch.value("has_pads") == 1 and not batch.pending_checks


def test_a_failed_check_refuses_the_batch_with_its_message_at_the_read():
    batch = structure()
    batch.check(torch.tensor(False), "never refused")
    batch.check(torch.tensor([True]), lambda: "the second check's message")
    with pytest.raises(ValueError, match="the second check's message"):
        batch.read(torch.tensor([1, 2]))
