"""``mdsfair-train -h`` and ``mdsfair-generate -h``: mdsfair's short help, printed without
importing torch or fairseq; ``--help-all``: the fairseq command's own help.

fairseq's ``--help`` cannot list what a user of mdsfair needs. ``parse_args_and_arch``
(fairseq/options.py) parses the command line once with fairseq's generic options, then adds
the options of the chosen ``--task``, ``--arch`` and ``--criterion`` and parses again; ``-h``
answers at the first parse, so fairseq-train prints its generic options (several hundred
lines) and never the task's or the model's. Building that parser also imports torch and
fairseq, seconds of CPU time before the first line.

The short help holds what the user chooses between and sets: mdsfair's tasks, architectures
(by model) and criterions by name; the options of the task (``multidoc_summarization``
unless ``--task`` names another), of the architecture ``--arch`` and of the criterion
``--criterion`` names, each with the options of the fairseq class it extends (BART's,
the Transformer's, label-smoothed cross-entropy's); and the fairseq command's common options
(:data:`~mdsfair.cli_help_table.COMMON_OPTIONS`). Every option line comes from
``mdsfair/cli_help_options.json`` (:class:`OptionTables`), which :mod:`mdsfair.cli_help_table`
reads from the real parsers (fairseq's, with mdsfair registered) and writes
(``python -m mdsfair.cli_help_table --write``); ``tests/test_cli_help_table.py`` compares it
with the parsers, so it follows every flag added or changed.

The tables store each option once. A class's options are its base's followed by its own,
each base option replaced where the class describes it otherwise (:func:`extended_rows`),
so a class stores only what its base lacks or describes otherwise: a fairseq class beyond
its fairseq base (:func:`fairseq_options`), and an mdsfair class beyond the mdsfair class
it extends (:func:`~mdsfair.cli_help_table.mdsfair_base`: the component model for the
BART-based families, whose presets differ in a few defaults; T5 for LongT5; the
summarization task for the sparse decoder's), else beyond its fairseq base
(:func:`mdsfair_options`).

``--help-all`` runs the fairseq command with ``--help``: fairseq's full list of its own options.
"""

import dataclasses
import json
import os
import shutil
import sys
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

#: One option as the help shows it: ``(invocation, help)``, e.g.
#: ``("--max-source-positions N", "max number of tokens in the source sequence (default: 1024)")``.
OptionRow = Tuple[str, str]

#: The flag that prints the fairseq command's own help (fairseq's ``--help``).
FULL_HELP = "--help-all"

#: The fairseq command behind each mdsfair command, and the parser its options come from.
FAIRSEQ_COMMAND = {"mdsfair-train": "fairseq-train", "mdsfair-generate": "fairseq-generate"}

#: The registries whose mdsfair entries the help lists: kind -> the flag that chooses one.
KINDS = {"task": "--task", "model": "--arch", "criterion": "--criterion"}

#: The task whose options ``-h`` lists when the command line names none.
DEFAULT_TASK = "multidoc_summarization"

#: Column of the help texts, and the width of the help, as argparse lays them out.
HELP_POSITION = 24


def asks_short_help(argv: Sequence[str]) -> bool:
    """Whether the command line asks for help (``-h`` / ``--help``), not for the full
    fairseq help (:data:`FULL_HELP`)."""
    return any(arg in ("-h", "--help") for arg in argv) and FULL_HELP not in argv


def with_full_help(argv: Sequence[str]) -> List[str]:
    """``argv`` with :data:`FULL_HELP` as fairseq's ``--help``: the fairseq command then
    prints its own help, every option of its parser."""
    return ["--help" if arg == FULL_HELP else arg for arg in argv]


def given(argv: Sequence[str], *flags: str) -> Optional[str]:
    """The value of the last ``FLAG VALUE`` / ``FLAG=VALUE`` of ``flags`` in ``argv``."""
    value = None
    for index, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and index + 1 < len(argv):
                value = argv[index + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    return value


# ---------------------------------------------------------------- the short help


def width() -> int:
    """The help's width: the terminal's less 2 columns, as argparse takes it."""
    return max(shutil.get_terminal_size().columns - 2, 60)


def option_lines(rows: Sequence[OptionRow], columns: int) -> List[str]:
    """The rows laid out as argparse lays out options: the invocation indented by 2, the
    help from column :data:`HELP_POSITION` (on the next line when the invocation is longer)."""
    lines = []
    for invocation, help_text in rows:
        wrapped = textwrap.wrap(help_text, max(columns - HELP_POSITION, 20), break_on_hyphens=False) or [""]
        if len(invocation) + 2 <= HELP_POSITION - 2:
            lines.append(f"  {invocation:<{HELP_POSITION - 4}}  {wrapped[0]}".rstrip())
            wrapped = wrapped[1:]
        else:
            lines.append(f"  {invocation}")
        lines += [" " * HELP_POSITION + line for line in wrapped]
    return lines


def paragraph(text: str, columns: int, indent: str = "") -> List[str]:
    return textwrap.wrap(text, columns, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False)


def flags_of(row: OptionRow) -> List[str]:
    """The option strings of a row (``-a``, ``--arch``); a positional's name."""
    return [part.split()[0] for part in row[0].split(", ")]


def extended_rows(base_rows: Sequence[OptionRow], own_rows: Sequence[OptionRow]) -> Tuple[OptionRow, ...]:
    """The options of a class whose ``add_args`` adds its base's, then its own: the base's
    ``base_rows`` in their order, each replaced by the row of ``own_rows`` that names one of
    its option strings (an option the class describes otherwise), then the rest of
    ``own_rows``."""
    own_by_flag = {flag: row for row in own_rows for flag in flags_of(row)}
    rows = tuple(next((own_by_flag[flag] for flag in flags_of(row) if flag in own_by_flag), row) for row in base_rows)
    return rows + tuple(row for row in own_rows if row not in rows)


#: An mdsfair class's entry in the tables: ``(the fairseq class it extends, by its registered
#: name, or None; the mdsfair class whose options it extends
#: (:func:`~mdsfair.cli_help_table.mdsfair_base`), by its registered name or, unregistered,
#: its qualified name, or None; its options that this mdsfair class lacks or describes
#: otherwise, or without one, those the fairseq class lacks or describes otherwise)``.
MdsfairEntry = Tuple[Optional[str], Optional[str], Tuple[OptionRow, ...]]


@dataclasses.dataclass(frozen=True)
class OptionTables:
    """The options the short help prints (``mdsfair/cli_help_options.json``), read from
    fairseq's parsers with mdsfair registered by :func:`~mdsfair.cli_help_table.collect_options`."""

    #: the fairseq whose parsers the tables were read from
    fairseq_version: str
    #: kind (task, model, criterion) -> mdsfair's registered name -> its :data:`MdsfairEntry`
    mdsfair: Dict[str, Dict[str, MdsfairEntry]]
    #: kind -> the qualified name of an unregistered mdsfair class that registered ones extend
    #: (the component model) -> its :data:`MdsfairEntry`
    mdsfair_bases: Dict[str, Dict[str, MdsfairEntry]]
    #: kind -> the registered name of a fairseq class mdsfair's extend (or that such a class
    #: extends) -> (the fairseq class it extends, by its registered name, or None; its options
    #: that class lacks or describes otherwise: :func:`fairseq_options` reads them back whole)
    fairseq: Dict[str, Dict[str, Tuple[Optional[str], Tuple[OptionRow, ...]]]]
    #: mdsfair's model -> its architectures
    architectures: Dict[str, Tuple[str, ...]]
    #: fairseq's model that mdsfair's extend -> its architectures
    fairseq_architectures: Dict[str, Tuple[str, ...]]
    #: command -> the fairseq options its short help lists (:data:`~mdsfair.cli_help_table.COMMON_OPTIONS`)
    common: Dict[str, Tuple[OptionRow, ...]]

    def to_json(self) -> str:
        """The tables as the JSON file holds them, with a line saying where they come from."""
        return json.dumps({"about": TABLES_ABOUT, **dataclasses.asdict(self)}, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "OptionTables":
        """The tables of :meth:`to_json`'s ``text``, every JSON list a tuple."""
        fields = json.loads(text)
        fields.pop("about")
        return cls(**{name: as_tuples(value) for name, value in fields.items()})


#: The first entry of the JSON file: where its tables come from.
TABLES_ABOUT = (
    "The options that mdsfair-train -h and mdsfair-generate -h print (mdsfair/cli_help.py), read from fairseq's "
    "parsers with mdsfair registered, so that the help needs neither torch nor fairseq. Written by python -m "
    "mdsfair.cli_help_table --write; tests/test_cli_help_table.py checks it against the parsers."
)

#: The file of the tables, beside this module (a package data file).
OPTIONS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_help_options.json")


def as_tuples(value):
    """``value`` read from JSON with each list a tuple (the tables' rows and entries)."""
    if isinstance(value, list):
        return tuple(as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: as_tuples(item) for key, item in value.items()}
    return value


def stored_tables() -> OptionTables:
    """The tables of ``mdsfair/cli_help_options.json``."""
    with open(OPTIONS_FILE, encoding="utf-8") as handle:
        return OptionTables.from_json(handle.read())


def fairseq_options(tables: OptionTables, kind: str, name: str) -> Tuple[OptionRow, ...]:
    """Every option of fairseq's class ``name`` of ``kind``: the table stores only those
    its own fairseq base lacks or describes otherwise, so they extend the base's, rebuilt
    the same way (:func:`extended_rows`)."""
    base, rows = tables.fairseq[kind][name]
    if base is None:
        return rows
    return extended_rows(fairseq_options(tables, kind, base), rows)


def mdsfair_entry(tables: OptionTables, kind: str, name: str) -> MdsfairEntry:
    """The entry of mdsfair's class ``name``: a registered one's, or an unregistered base's."""
    if name in tables.mdsfair[kind]:
        return tables.mdsfair[kind][name]
    return tables.mdsfair_bases[kind][name]


def every_mdsfair_option(tables: OptionTables, kind: str, name: str) -> Tuple[OptionRow, ...]:
    """Every option of mdsfair's class ``name``, its base's (mdsfair's, else fairseq's)
    extended by its own (:func:`extended_rows`)."""
    fairseq_base, base, rows = mdsfair_entry(tables, kind, name)
    if base is not None:
        return extended_rows(every_mdsfair_option(tables, kind, base), rows)
    if fairseq_base is not None:
        return extended_rows(fairseq_options(tables, kind, fairseq_base), rows)
    return rows


def mdsfair_options(tables: OptionTables, kind: str, name: str) -> Tuple[Optional[str], Tuple[OptionRow, ...]]:
    """``(the fairseq class mdsfair's class name extends, or None; its options that this
    fairseq class lacks or describes otherwise)``, read back from its entry."""
    fairseq_base, base, rows = mdsfair_entry(tables, kind, name)
    if base is None:
        return fairseq_base, rows
    inherited = fairseq_options(tables, kind, fairseq_base) if fairseq_base is not None else ()
    return fairseq_base, tuple(row for row in every_mdsfair_option(tables, kind, name) if row not in inherited)


def options_section(tables: OptionTables, kind: str, name: str, what: str, columns: int) -> List[str]:
    """The options of ``what`` (``--task NAME``, ...): mdsfair's entry ``name`` of
    ``kind``, then those of the fairseq class it extends that it does not list itself."""
    base, rows = mdsfair_options(tables, kind, name)
    lines = [f"options of {what}:"] + option_lines(rows, columns)
    if base is not None:
        own = {flag for row in rows for flag in flags_of(row)}
        inherited = [row for row in fairseq_options(tables, kind, base) if not own & set(flags_of(row))]
        lines += ["", f"options of {what} from fairseq's {base}:"] + option_lines(inherited, columns)
    return lines


def architecture_section(tables: OptionTables, arch: str, columns: int) -> List[str]:
    """The options of ``--arch ARCH``: its model's (and the fairseq model's it extends), or
    those of a fairseq model that mdsfair's extend, or a line saying the help has none."""
    for model, archs in tables.architectures.items():
        if arch in archs:
            return options_section(tables, "model", model, f"--arch {arch} (model {model})", columns)
    for model, archs in tables.fairseq_architectures.items():
        if arch in archs:
            rows = fairseq_options(tables, "model", model)
            return [f"options of --arch {arch} (fairseq's model {model}):"] + option_lines(rows, columns)
    return paragraph(
        f"--arch {arch}: not an architecture of mdsfair nor of the fairseq models they extend; "
        "fairseq's help lists no model options, see the documentation of the package that registers it.",
        columns,
    )


def registered_section(tables: OptionTables, prog: str, kind: str, name: str, columns: int) -> List[str]:
    """The options of ``--task NAME`` / ``--criterion NAME``, or a line saying the help has none."""
    flag = KINDS[kind]
    if name in tables.mdsfair[kind]:
        return options_section(tables, kind, name, f"{flag} {name}", columns)
    return paragraph(f"{flag} {name}: not one of mdsfair's; {prog} {FULL_HELP} prints fairseq's help.", columns)


def names_section(tables: OptionTables, prog: str, columns: int) -> List[str]:
    """mdsfair's tasks, architectures (by model) and, for training, criterions."""
    lines = paragraph("mdsfair's tasks (--task): " + ", ".join(tables.mdsfair["task"]), columns)
    if prog == "mdsfair-train":
        lines += ["mdsfair's architectures (--arch), by model:"]
        for model, archs in tables.architectures.items():
            lines += paragraph(f"{model}: " + ", ".join(archs), columns, indent="  ")
        lines += paragraph("mdsfair's criterions (--criterion): " + ", ".join(tables.mdsfair["criterion"]), columns)
    return lines


USAGE = {
    "mdsfair-train": "usage: mdsfair-train DATA --task TASK --arch ARCH [--criterion CRITERION] [options]",
    "mdsfair-generate": "usage: mdsfair-generate DATA --task TASK --path CHECKPOINT [options]",
}

DESCRIPTION = {
    "mdsfair-train": (
        "fairseq-train with mdsfair's tasks, models and criterions registered (--user-dir: the installed "
        "mdsfair). DATA is a data-bin written by mdsfair-preprocess. Every fairseq-train option is accepted; "
        "this help lists mdsfair's and the common ones (docs/training.md)."
    ),
    "mdsfair-generate": (
        "fairseq-generate with mdsfair's tasks and models registered (--user-dir: the installed mdsfair). "
        "DATA is the data-bin, --path the checkpoint, which holds the model's options. Every fairseq-generate "
        "option is accepted; this help lists the task's and the common ones (docs/training.md)."
    ),
}


def short_help(prog: str, argv: Sequence[str], columns: Optional[int] = None) -> str:
    """The short help of ``prog`` (``mdsfair-train`` or ``mdsfair-generate``) for the
    command line ``argv``: its ``--task``, ``--arch`` and ``--criterion`` choose the option
    sections (``--arch`` and ``--criterion`` for ``mdsfair-train`` only, as the checkpoint
    chooses the model of a generation). Reads ``mdsfair/cli_help_options.json`` only."""
    tables = stored_tables()
    columns = columns or width()
    fairseq_command = FAIRSEQ_COMMAND[prog]
    lines = [USAGE[prog], ""] + paragraph(DESCRIPTION[prog], columns) + [""]
    lines += names_section(tables, prog, columns) + [""]
    lines += registered_section(tables, prog, "task", given(argv, "--task") or DEFAULT_TASK, columns) + [""]
    more = [("-h --task TASK", "the options of another task")]
    if prog == "mdsfair-train":
        arch = given(argv, "--arch", "-a")
        if arch is not None:
            lines += architecture_section(tables, arch, columns) + [""]
        criterion = given(argv, "--criterion")
        if criterion is not None:
            lines += registered_section(tables, prog, "criterion", criterion, columns) + [""]
        more += [
            ("-h --arch ARCH", "an architecture's options: its model's, and those of the fairseq model it extends"),
            ("-h --criterion CRITERION", "a criterion's options"),
        ]
    lines += [f"common {fairseq_command} options:"] + option_lines(tables.common[prog], columns) + [""]
    more += [
        (FULL_HELP, f"{fairseq_command}'s own help: every option of its parser (imports torch and fairseq)"),
    ]
    lines += ["more help:"] + option_lines([(f"{prog} {flags}", text) for flags, text in more], columns)
    return "\n".join(lines) + "\n"


def print_short_help(prog: str, argv: Sequence[str]) -> None:
    sys.stdout.write(short_help(prog, argv))
