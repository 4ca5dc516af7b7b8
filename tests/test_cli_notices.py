"""mdsfair-train and mdsfair-generate ignore fairseq's known third-party
notices for their own run only: each by message, category and module, and the
warning filters are restored when the command ends."""

import re
import warnings

import pytest

from mdsfair.cli import THIRD_PARTY_NOTICES, third_party_notices_ignored

#: a message each notice is raised with (fairseq 0.12.3, hydra 1.3, torch 2.x), and a module it comes from
RAISED = {
    r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental": (
        "hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()",
        "hydra.experimental.initialize",
    ),
    r"\s*The version_base parameter is not specified": (
        "\nThe version_base parameter is not specified.\nHydra will assume defaults for version 1.1.",
        "hydra.experimental.initialize",
    ),
    r"In '.*'. Usage of deprecated keyword in package header '# @package _group_'": (
        "In 'config': Usage of deprecated keyword in package header '# @package _group_'.",
        "hydra.core.default_element",
    ),
    r"\s*'.*' is validated against ConfigStore schema with the same name": (
        "\n'config' is validated against ConfigStore schema with the same name.",
        "mdsfair.cli",
    ),
    r"\s*The strict flag in the compose API is deprecated": (
        "\nThe strict flag in the compose API is deprecated.",
        "hydra.compose",
    ),
    r"`torch\.cuda\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated": (
        "`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead.",
        "fairseq.tasks.fairseq_task",
    ),
    r"'pin_memory' argument is set as true but no accelerator is found": (
        "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.",
        "torch.utils.data.dataloader",
    ),
    r"Support for mismatched key_padding_mask and attn_mask is deprecated": (
        "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both instead.",
        "torch.nn.functional",
    ),
}


def raise_from(message: str, category, module: str) -> None:
    warnings.warn_explicit(message, category, filename=module.replace(".", "/") + ".py", lineno=1, module=module)


def test_every_notice_has_a_raised_example_and_a_reason():
    assert sorted(RAISED) == sorted(message for message, _, _, _ in THIRD_PARTY_NOTICES)
    for message, category, module, why in THIRD_PARTY_NOTICES:
        text, origin = RAISED[message]
        assert re.match(message, text, flags=re.I) and re.match(module, origin), (message, module)
        assert why and issubclass(category, Warning)


@pytest.mark.parametrize("notice", THIRD_PARTY_NOTICES, ids=lambda notice: notice[0][:40])
def test_notice_ignored_only_inside_the_command_and_only_from_its_module(notice):
    message, category, _module, _why = notice
    text, origin = RAISED[message]
    filters_before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with third_party_notices_ignored():
            raise_from(text, category, origin)
            raise_from(text, category, "mdsfair.models.somewhere")  # the same words from mdsfair's own code
            raise_from("another notice", category, origin)  # another message from the same module
        raise_from(text, category, origin)  # after the command
    assert [(str(w.message), w.filename) for w in shown] == [
        (text, "mdsfair/models/somewhere.py"),
        ("another notice", origin.replace(".", "/") + ".py"),
        (text, origin.replace(".", "/") + ".py"),
    ]
    assert warnings.filters == filters_before
