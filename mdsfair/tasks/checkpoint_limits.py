"""The input limits generation takes from the checkpoint it decodes with.

A model learns from the sources as the task's input limits leave them: how
many tokens (``--max-source-positions``), documents, paragraphs and tokens per
paragraph, with or without an even share per document, joined by which layout
(:class:`~mdsfair.data.source_truncation.TruncationConfig`). Generation has to
cut the sources the same way, or the model reads what it never saw in
training: a Hierarchical Transformer trained on 24 paragraphs in 1,600 tokens
and decoded at the default 1,024 tokens keeps a third fewer source tokens.

``fairseq-generate`` (and so ``mdsfair-generate``) sets the task up from its
own command line, loads the models, then hands the task the checkpoint's task
configuration: ``task.load_dataset(gen_subset, task_cfg=saved_cfg.task)``
(``fairseq_cli/generate.py``; ``fairseq-validate`` does the same). The task
then applies :func:`resolve_input_limits`: a limit given on the command line
wins; every other takes the checkpoint's value (with ``--model-overrides``
applied, as fairseq applies them to the whole saved configuration); a limit
the checkpoint does not record (an older configuration) keeps the command
line's default. One INFO line, :func:`describe_input_limits`, says what was
used and where each value came from, an override as ``--max-source-positions
1024 overrides the checkpoint's 1600``. The hub needs none of this: it sets
its task up from the checkpoint's configuration, with the caller's overrides.

A limit counts as given when its flag is on the command line (``sys.argv``,
which both commands parse; ``--flag VALUE`` or ``--flag=VALUE``, fairseq's
parser takes no abbreviation) or when the configuration holds a value other
than the option's default (a configuration built in code, such as
``fairseq_cli.generate.main`` called on a parsed namespace). A switch the
checkpoint turned on (``--per-document-budget``) has no flag that turns it
off, and stays on.

``--no-truncate-target`` is not an input limit: it decides whether long
references are cut or filtered, which in generation only decides whether a
cluster is refused (every test cluster gets a hypothesis by default), so
generation keeps its own.
"""

import dataclasses
import sys
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Optional, Sequence

#: The task options that decide which tokens a model reads (and, for
#: ``max_target_positions``, where its references are cut), in the order the
#: report lists them.
INPUT_LIMITS = (
    "max_source_positions",
    "max_target_positions",
    "max_documents",
    "max_paragraphs",
    "max_paragraph_tokens",
    "per_document_budget",
    "no_document_start_token",
    "source_layout",
)

#: Where a limit's value came from.
GIVEN = "given"
CHECKPOINT = "checkpoint"
DEFAULT = "default"
DATA_BIN = "data-bin"


def flag(name: str) -> str:
    """The command-line flag of the option ``name``."""
    return "--" + name.replace("_", "-")


def flags_on_command_line(argv: Optional[Sequence[str]] = None, names: Iterable[str] = INPUT_LIMITS) -> FrozenSet[str]:
    """The options among ``names`` whose flag is in ``argv`` (default:
    ``sys.argv[1:]``) as ``--flag`` or ``--flag=VALUE``."""
    argv = sys.argv[1:] if argv is None else argv
    by_flag = {flag(name): name for name in names}
    return frozenset(by_flag[arg.split("=", 1)[0]] for arg in argv if arg.split("=", 1)[0] in by_flag)


def option_defaults(config_class) -> Dict[str, Any]:
    """The defaults of the input limits among the fields of the dataclass ``config_class``."""
    return {field.name: field.default for field in dataclasses.fields(config_class) if field.name in INPUT_LIMITS}


def plain(value: Any) -> Any:
    """A configuration value as Python sees it (an enum choice as its string)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def recorded(config, name: str):
    """``(True, value)`` when the configuration ``config`` (an omegaconf
    config, a dataclass or a namespace) records the option ``name``, else
    ``(False, None)``."""
    if config is None:
        return False, None
    if isinstance(config, Mapping) or hasattr(config, "keys"):
        return (True, plain(config[name])) if name in config else (False, None)
    return (True, plain(getattr(config, name))) if hasattr(config, name) else (False, None)


@dataclasses.dataclass(frozen=True)
class InputLimit:
    """The value one input limit takes, where it came from (:data:`GIVEN`,
    :data:`CHECKPOINT`, :data:`DEFAULT` or :data:`DATA_BIN`), and the
    checkpoint's value when the checkpoint records one."""

    name: str
    value: Any
    origin: str
    in_checkpoint: bool = False
    checkpoint_value: Any = None

    def describe(self) -> str:
        shown = f"{flag(self.name)} {show(self.value)}"
        if self.origin == GIVEN and self.in_checkpoint and self.checkpoint_value != self.value:
            return f"{shown} overrides the checkpoint's {show(self.checkpoint_value)}"
        if self.origin == GIVEN and self.in_checkpoint:
            return f"{shown} (given, as the checkpoint's)"
        if self.origin == DEFAULT and not self.in_checkpoint:
            return f"{shown} (default; the checkpoint records none)"
        return f"{shown} ({self.origin})"


def show(value: Any) -> str:
    """A limit's value in the report: ``none``, ``on`` / ``off`` for a switch."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def resolve_input_limits(
    command_line_cfg, checkpoint_cfg, defaults: Mapping[str, Any], argv: Optional[Sequence[str]] = None
) -> Dict[str, InputLimit]:
    """Every input limit's value for generation: the command line's where
    it was given (see the module's docstring), else the checkpoint's, else
    the command line's default. ``defaults`` are the options' defaults
    (:func:`option_defaults`); a ``checkpoint_cfg`` that is the command line's
    configuration itself (``fairseq-validate`` sets its task up from the
    checkpoint) gives every limit as the checkpoint's."""
    if checkpoint_cfg is command_line_cfg:
        given: FrozenSet[str] = frozenset()
    else:
        on_command_line = flags_on_command_line(argv)
        given = frozenset(
            name
            for name in INPUT_LIMITS
            if name in on_command_line or plain(getattr(command_line_cfg, name, None)) != plain(defaults.get(name))
        )
    limits = {}
    for name in INPUT_LIMITS:
        command_line_value = plain(getattr(command_line_cfg, name, None))
        in_checkpoint, checkpoint_value = recorded(checkpoint_cfg, name)
        if name in given:
            value, origin = command_line_value, GIVEN
        elif in_checkpoint:
            value, origin = checkpoint_value, CHECKPOINT
        else:
            value, origin = command_line_value, DEFAULT
        limits[name] = InputLimit(name, value, origin, in_checkpoint, checkpoint_value)
    return limits


def with_data_bin_layout(
    limits: Mapping[str, InputLimit], source_layout: str, recorded_layout: Optional[Mapping]
) -> Dict[str, InputLimit]:
    """``limits`` as the task applies them to a data-bin: a source layout
    neither given nor in the checkpoint is the one the data-bin records
    (``mdsfair-preprocess --source-layout``), or ``documents``; a recorded
    PRIMERA layout brings its per-document budget."""
    limits = dict(limits)
    layout = limits["source_layout"]
    if layout.value is None:
        origin = DATA_BIN if (recorded_layout or {}).get("name") else DEFAULT
        limits["source_layout"] = dataclasses.replace(layout, value=source_layout, origin=origin)
    budget = limits["per_document_budget"]
    if not budget.value and (recorded_layout or {}).get("per_document_budget"):
        limits["per_document_budget"] = dataclasses.replace(budget, value=True, origin=DATA_BIN)
    return limits


def describe_input_limits(limits: Mapping[str, InputLimit], split: str) -> str:
    """The one log line of the limits generation uses for ``split``."""
    return f"input limits of split {split} (a flag given wins, else the checkpoint's): " + ", ".join(
        limits[name].describe() for name in INPUT_LIMITS if name in limits
    )
