"""The component model's flags under the T5 architectures
(:mod:`mdsfair.models.t5_component_flags`): every flag of the component
registry (each role flag with each of its components, each component's own
flag), given to fairseq-train's parser with a T5 architecture, is parsed and
then refused when the model is built, naming the flag, its role's reason and
what to use instead; so is one given as a checkpoint override (what the
torch.hub interface passes); T5's ``--help`` lists none of them."""

import argparse
import os
from types import SimpleNamespace

import pytest
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import mdsfair
from mdsfair.models.t5 import T5Model
from mdsfair.models.t5_component_flags import INSTEAD, ROLE_REASONS, component_model_fields, component_model_flags
from mdsfair.modules.components import ROLES, component_names, flag_of

mdsfair.register()


def t5_architectures():
    """The tiny architectures of T5 and of every model built on it."""
    return sorted(
        arch for arch, model in ARCH_MODEL_REGISTRY.items() if issubclass(model, T5Model) and arch.endswith("_tiny")
    )


def component_flag_words():
    """``(dest, command-line words)``: each role flag with each of its
    components, and each component's own flag with a value it accepts (its
    default, else its first choice, else 1; a switch alone)."""
    fields = component_model_fields()
    for dest in component_model_flags():
        if dest in ROLES:
            for name in component_names(dest):
                yield dest, [flag_of(dest), name]
            continue
        keywords = fields[dest].metadata["argparse"]
        if keywords.get("action") == "store_true":
            yield dest, [flag_of(dest)]
        else:
            default = fields[dest].default
            value = default if default is not None else (keywords.get("choices") or [1])[0]
            yield dest, [flag_of(dest), str(value)]


def own_flags(arch: str):
    """The flags the architecture's model declares itself, visibly, with their choices."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    return {
        flag: action.choices
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
    }


def tiny_task():
    dictionary = Dictionary()
    for index in range(20):
        dictionary.add_symbol(f"w{index}")
    return SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)


@pytest.mark.parametrize("arch", t5_architectures())
def test_every_flag_of_the_component_registry_is_refused_with_its_reason(arch, tmp_path, capsys):
    """Refused when the model is built; a component named to a role flag
    that T5 declares itself (LongT5's ``--encoder-self-attention``), by
    T5's parser, with the same reason."""
    flags = component_model_flags()
    own = own_flags(arch)
    checked = set()
    for dest, words in component_flag_words():
        argv = [str(tmp_path), "--task", "multidoc_summarization", "--arch", arch, *words]
        if words[0] in own:
            if own[words[0]] is None:  # T5's own flag of the same meaning (the relative bias's buckets)
                checked.add(dest)
            elif words[1] not in own[words[0]]:
                with pytest.raises(SystemExit):
                    options.parse_args_and_arch(options.get_training_parser(), argv)
                error = capsys.readouterr().err
                assert f"{' '.join(words)} ({flags[dest][1]}): {ROLE_REASONS[dest]}" in error, error[-2000:]
                checked.add(dest)
            continue
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        with pytest.raises(ValueError) as refused:
            ARCH_MODEL_REGISTRY[arch].build_model(args, tiny_task())
        message = str(refused.value)
        role, what = flags[dest]
        assert f"{' '.join(words)} ({what}): {ROLE_REASONS[role]}" in message and message.endswith(INSTEAD), message
        checked.add(dest)
    assert checked == set(flags)


def test_the_refusal_names_every_flag_given():
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["data", "--task", "multidoc_summarization", "--arch", "t5_v1_1_tiny", "--encoder-positions",
         "document-restart", "--cross-attention", "document-scaled", "--top-r", "3"],
    )  # fmt: skip
    with pytest.raises(ValueError) as refused:
        ARCH_MODEL_REGISTRY["t5_v1_1_tiny"].build_model(args, tiny_task())
    message = str(refused.value)
    assert message.startswith("--arch t5_v1_1_tiny is T5, not the component model, and takes none of its flags: ")
    for shown in ("--encoder-positions document-restart", "--cross-attention document-scaled", "--top-r 3"):
        assert shown in message
    assert "token k of every document 0 apart from token k of every other" in message


def test_t5_help_lists_none_of_them_and_the_model_builds_without_them():
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    T5Model.add_args(parser)
    shown = {flag for action in parser._actions if action.help != argparse.SUPPRESS for flag in action.option_strings}
    assert not shown & {flag_of(dest) for dest in component_model_flags()} - set(own_flags("t5_v1_1_tiny"))
    args = options.parse_args_and_arch(
        options.get_training_parser(), ["data", "--task", "multidoc_summarization", "--arch", "t5_v1_1_tiny"]
    )
    ARCH_MODEL_REGISTRY["t5_v1_1_tiny"].build_model(args, tiny_task())


def test_a_checkpoint_override_is_refused_too(tmp_path):
    """What ``from_pretrained(..., cross_attention="sparse")`` and
    ``fairseq-generate --model-overrides`` pass: the checkpoint's model is
    built with the override, and refused."""
    from fairseq import checkpoint_utils

    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from mdsfair.importers.hf_t5 import import_hf_t5
    from tests.t5_fixtures import tiny_hf_t5

    hf_dir = tiny_hf_t5(str(tmp_path / "hf"))
    out_dir = str(tmp_path / "imported")
    import_hf_t5(hf_dir, out_dir)
    with pytest.raises(ValueError, match=r"--cross-attention sparse \(a component of --cross-attention\)"):
        checkpoint_utils.load_model_ensemble_and_task(
            [os.path.join(out_dir, "model.pt")], arg_overrides={"data": out_dir, "cross_attention": "sparse"}
        )
