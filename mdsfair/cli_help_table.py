"""The table of options that mdsfair's short help prints
(``mdsfair/cli_help_options.json``, :class:`~mdsfair.cli_help.OptionTables`),
read from fairseq's parsers with mdsfair registered, and its check.

``python -m mdsfair.cli_help_table`` reads the tables again (:func:`collect_options`:
imports torch and fairseq) and says whether the file holds them; ``--write``
rewrites it. ``tests/test_cli_help_table.py`` runs the check, so the file follows
every flag added or changed, and :mod:`mdsfair.cli_help` prints the help from the
file without importing torch or fairseq.

Each mdsfair task, model and criterion is stored as the options beyond the class
it extends (:func:`table_entry`: its nearest fairseq base;
:func:`store_beyond_mdsfair_base`: its nearest mdsfair base, where that stores
fewer rows), the way :func:`~mdsfair.cli_help.extended_rows` reads them back.
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Tuple

from mdsfair.cli_help import (
    KINDS,
    OPTIONS_FILE,
    OptionRow,
    OptionTables,
    extended_rows,
    flags_of,
    mdsfair_options,
)

#: The fairseq options of each command that its short help lists (their lines are read from
#: fairseq's parser, :func:`collect_options`): what a run of the command usually sets.
COMMON_OPTIONS = {
    "mdsfair-train": (
        "--arch",
        "--max-tokens",
        "--batch-size",
        "--update-freq",
        "--lr",
        "--max-epoch",
        "--max-update",
        "--save-dir",
        "--restore-file",
        "--keep-last-epochs",
        "--patience",
        "--seed",
        "--cpu",
        "--fp16",
        "--num-workers",
    ),
    "mdsfair-generate": (
        "--path",
        "--gen-subset",
        "--beam",
        "--nbest",
        "--lenpen",
        "--max-len-a",
        "--max-len-b",
        "--min-len",
        "--no-repeat-ngram-size",
        "--prefix-size",
        "--max-tokens",
        "--batch-size",
        "--results-path",
        "--post-process",
        "--cpu",
        "--fp16",
    ),
}


def help_text(action: argparse.Action) -> str:
    """An option's help as argparse prints it (``%(default)s`` and the like filled in, the
    white space joined), with ``(default: VALUE)`` appended where the help does not say its
    default and the default is a number or a word (not ``None``, a switch's ``False``, or
    one of fairseq's ``${...}`` references to another option)."""
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    if "%" in text:
        params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
        for key, value in params.items():
            if hasattr(value, "__name__"):
                params[key] = value.__name__
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(choice) for choice in params["choices"])
        try:
            text = text % params
        except (KeyError, TypeError, ValueError):  # a help never formatted by argparse (a model's)
            pass
    text = " ".join(text.split())
    default = action.default
    shown = isinstance(default, (int, float, str)) and not isinstance(default, bool) and default != ""
    if shown and not (isinstance(default, str) and default.startswith("${")) and "default" not in text.lower():
        text = (text + " " if text else "") + f"(default: {default})"
    return text


def invocation(action: argparse.Action) -> str:
    """``-a ARCH, --arch`` style: the option strings, then the value it takes (its metavar;
    its choices when there are at most 8; else its name in capitals), as argparse shows
    them; a positional's name."""
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None and len(action.choices) <= 8:
        metavar = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        metavar = action.dest.upper()
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    if action.nargs in ("+", "*"):
        metavar = f"{metavar} [{metavar} ...]"
    elif action.nargs == "?":
        metavar = f"[{metavar}]"
    return ", ".join(action.option_strings) + " " + metavar


def option_rows(parser: argparse.ArgumentParser) -> Tuple[OptionRow, ...]:
    """Every option of ``parser`` (``-h`` left out, hidden ones too), in its order."""
    return tuple(
        (invocation(action), help_text(action))
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
    )


def rows_of(cls) -> Tuple[OptionRow, ...]:
    """The options ``cls.add_args`` adds (a task's, model's or criterion's, as fairseq adds them)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    cls.add_args(parser)
    return option_rows(parser)


def fairseq_base(cls, registry: Dict[str, type]) -> Optional[str]:
    """The registered name of the nearest fairseq class among ``cls``'s bases."""
    for ancestor in cls.__mro__[1:]:
        if ancestor.__module__.startswith("fairseq."):
            for name, registered in registry.items():
                if registered is ancestor:
                    return name
    return None


def table_entry(
    name: str, registry: Dict[str, type], fairseq_table: dict, full_rows: Dict[str, tuple], cls: Optional[type] = None
) -> tuple:
    """The entry of ``registry``'s class ``name`` (or of ``cls``, a class the registry does not
    hold, by its qualified name): ``(the nearest fairseq class among its bases, by its
    registered name, or None; its options that this base lacks or describes otherwise)``. The
    base enters ``fairseq_table`` first, as its own entry, so that :func:`~mdsfair.cli_help.fairseq_options`
    rebuilds every option of a fairseq class from its base's; ``full_rows`` keeps every option
    of each class read. Raises ValueError when a fairseq class's options are not its base's
    followed by its own (:func:`~mdsfair.cli_help.extended_rows`)."""
    cls = registry[name] if cls is None else cls
    rows = full_rows[name] = rows_of(cls)
    base = fairseq_base(cls, registry)
    if base is None:
        return None, rows
    if base not in fairseq_table:
        fairseq_table[base] = table_entry(base, registry, fairseq_table, full_rows)
        base_of_base, own_rows = fairseq_table[base]
        if base_of_base is not None and extended_rows(full_rows[base_of_base], own_rows) != full_rows[base]:
            base_class = registry[base]
            raise ValueError(
                f"mdsfair/cli_help_table.py: the options of fairseq's {base} ({base_class.__module__}."
                f"{base_class.__name__}) are not those of its base {base_of_base} followed by its own, "
                "as the table stores them"
            )
    return base, tuple(row for row in rows if row not in full_rows[base])


def mdsfair_base(cls, registry: Dict[str, type]) -> Optional[type]:
    """The nearest of ``cls``'s bases that is mdsfair's and registered in ``registry`` or
    adds options itself (its own ``add_args``), or None: the class whose options ``cls``
    shares (the component model for the BART-based families, T5 for LongT5, the
    summarization task for the sparse decoder's)."""
    registered = {id(registered_class) for registered_class in registry.values()}
    for ancestor in cls.__mro__[1:]:
        if ancestor.__module__.startswith("mdsfair.") and (id(ancestor) in registered or "add_args" in vars(ancestor)):
            return ancestor
    return None


def class_name(cls, registry: Dict[str, type]) -> str:
    """``cls``'s registered name in ``registry``, or its qualified name (``module.Class``)."""
    for name, registered in registry.items():
        if registered is cls:
            return name
    return f"{cls.__module__}.{cls.__qualname__}"


def store_beyond_mdsfair_base(
    tables: OptionTables, kind: str, name: str, registry: Dict[str, type], full_rows: Dict[str, tuple]
) -> None:
    """Store mdsfair's class ``name`` of ``kind`` as the options beyond its
    :func:`mdsfair_base` (an unregistered base enters ``tables.mdsfair_bases`` as its own
    entry) where that stores fewer rows and :func:`~mdsfair.cli_help.mdsfair_options` reads back the options
    beyond its fairseq base; else its entry stays as it is."""
    base_class = mdsfair_base(registry[name], registry)
    if base_class is None:
        return
    base_name = class_name(base_class, registry)
    fairseq_base_name, _, own_rows = entry = tables.mdsfair[kind][name]
    new_base = base_name not in tables.mdsfair[kind] and base_name not in tables.mdsfair_bases[kind]
    if new_base:
        base_fairseq, base_rows = table_entry(base_name, registry, tables.fairseq[kind], full_rows, cls=base_class)
        tables.mdsfair_bases[kind][base_name] = (base_fairseq, None, base_rows)
    rows = tuple(row for row in full_rows[name] if row not in full_rows[base_name])
    tables.mdsfair[kind][name] = (fairseq_base_name, base_name, rows)
    if len(rows) >= len(own_rows) or mdsfair_options(tables, kind, name) != (fairseq_base_name, own_rows):
        tables.mdsfair[kind][name] = entry
        if new_base:
            del tables.mdsfair_bases[kind][base_name]


def collect_options() -> OptionTables:
    """The tables of ``mdsfair/cli_help_options.json``, read from fairseq's parsers with
    mdsfair registered (imports torch and fairseq): each mdsfair task, model and criterion
    (:data:`~mdsfair.cli_help.MdsfairEntry`: against the mdsfair class it extends, :func:`store_beyond_mdsfair_base`,
    else against the fairseq class it extends), the options of those fairseq classes and of
    the fairseq classes they extend (read back whole by :func:`~mdsfair.cli_help.fairseq_options`), mdsfair's
    architectures by model, the architectures of the fairseq models mdsfair's extend and the
    :data:`COMMON_OPTIONS` of each command."""
    import fairseq
    from fairseq import options
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    import mdsfair

    mdsfair.register()
    registries = {"task": TASK_REGISTRY, "model": MODEL_REGISTRY, "criterion": CRITERION_REGISTRY}
    tables = OptionTables(
        fairseq_version=fairseq.__version__,
        mdsfair={kind: {} for kind in KINDS},
        mdsfair_bases={kind: {} for kind in KINDS},
        fairseq={kind: {} for kind in KINDS},
        architectures={},
        fairseq_architectures={},
        common={},
    )
    for kind, registry in registries.items():
        full_rows: Dict[str, tuple] = {}
        names = [name for name in sorted(registry) if registry[name].__module__.startswith("mdsfair.")]
        for name in names:
            base, rows = table_entry(name, registry, tables.fairseq[kind], full_rows)
            tables.mdsfair[kind][name] = (base, None, rows)
        for name in names:
            store_beyond_mdsfair_base(tables, kind, name, registry, full_rows)
    model_names = {id(cls): name for name, cls in MODEL_REGISTRY.items()}
    architectures: Dict[str, List[str]] = {}
    fairseq_architectures: Dict[str, List[str]] = {}
    for arch in sorted(ARCH_MODEL_REGISTRY):
        model = model_names[id(ARCH_MODEL_REGISTRY[arch])]
        if ARCH_CONFIG_REGISTRY[arch].__module__.startswith("mdsfair."):
            architectures.setdefault(model, []).append(arch)
        elif model in tables.fairseq["model"]:
            fairseq_architectures.setdefault(model, []).append(arch)
    tables.architectures.update((model, tuple(architectures[model])) for model in sorted(architectures))
    tables.fairseq_architectures.update(
        (model, tuple(fairseq_architectures[model])) for model in sorted(fairseq_architectures)
    )
    saved_argv = sys.argv
    sys.argv = [saved_argv[0]]  # fairseq's get_parser reads --user-dir from sys.argv
    try:
        parsers = {"mdsfair-train": options.get_training_parser(), "mdsfair-generate": options.get_generation_parser()}
    finally:
        sys.argv = saved_argv
    for prog, flags in COMMON_OPTIONS.items():
        rows = {flag: row for row in option_rows(parsers[prog]) for flag in flags_of(row)}
        missing = [flag for flag in flags if flag not in rows]
        if missing:
            raise ValueError(
                f"mdsfair/cli_help_table.py: COMMON_OPTIONS[{prog!r}] names {missing}, not options of fairseq"
            )
        tables.common[prog] = tuple(rows[flag] for flag in flags)
    return tables


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mdsfair.cli_help_table",
        description="Read the options of mdsfair's short help from fairseq's parsers (imports torch and fairseq).",
    )
    parser.add_argument(
        "--write", action="store_true", help=f"rewrite {OPTIONS_FILE} (default: say whether it is current)"
    )
    options = parser.parse_args(argv)
    text = collect_options().to_json()
    current = False
    if os.path.exists(OPTIONS_FILE):
        with open(OPTIONS_FILE, encoding="utf-8") as handle:
            current = handle.read() == text
    if options.write and not current:
        with open(OPTIONS_FILE, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"rewrote {OPTIONS_FILE}")
        return 0
    print(f"{OPTIONS_FILE} is {'current' if current else 'out of date: run python -m mdsfair.cli_help_table --write'}")
    return 0 if current else 1


if __name__ == "__main__":
    sys.exit(main())
