"""One table of defaults per model: the single source that ``add_args``, the
architecture functions and the documentation read.

fairseq's legacy models write each default up to four times: in an
``add_argument`` help text, in ``getattr(args, name, default)`` inside every
architecture function, in ``getattr`` calls scattered through the model, and in
the README. A model here declares its flags' defaults once::

    DEFAULTS = FlagDefaults({
        "attention_window": 1024,          # a plain value
        "decoder_embed_dim": lambda args: args.encoder_embed_dim,  # derived
    })

and then

* ``add_args`` is decorated with ``@DEFAULTS.documented`` and writes
  ``parser.add_argument("--attention-window", help="what it does")``; the
  decorator appends ``(default: 1024)`` read from the table to the help of
  every flag the table holds, the base model's too. (fairseq 0.12's
  ``fairseq-train --help`` prints its generic groups only, not a model's
  ``add_args``; the per-system READMEs document the flags, and tests check
  the defaults they state against the table, e.g.
  ``tests/test_hiertransformer.py``.)
* an architecture function calls ``DEFAULTS.fill(args, attention_window=512)``:
  every flag the user left unset (missing or ``None``) gets the architecture's
  value if it names one, else the table's; values given on the command line or
  stored in a checkpoint are kept, as fairseq's ``getattr(args, name, default)``
  keeps them;
* the model reads ``args.name`` directly: after the architecture function ran,
  every flag of the table is set.

A table may also be read when it is used: ``FlagDefaults(function)`` calls
``function()`` for its entries each time it fills, documents or is iterated,
and the tables ``extended`` from it are read the same way. The component
model's table is such a one (:func:`mdsfair.models.component_flags.component_defaults`):
its entries are the defaults of the components registered when an
architecture runs, not when the model's module was imported.

Why not ``argparse`` defaults: fairseq's architectures override a model's
defaults (``led_base`` and ``primera`` differ in window and positions), and an
``add_argument(default=...)`` value cannot be told apart from one the user
typed, which is why fairseq itself leaves them out of legacy ``add_args``.
"""

import functools
from typing import Any, Callable, Dict, Iterator, Mapping, Union

Default = Union[Any, Callable[[Any], Any]]
#: the help text of an argparse action before its table default was appended
_HELP_TEXT = "_mdsfair_help_text"


class FlagDefaults(Mapping):
    """A model's flag defaults (flag names as argparse ``dest``: underscores):
    a dictionary, or a function returning one, read each time the table is
    used (see the module docstring)."""

    def __init__(self, table: Union[Dict[str, Default], Callable[[], Dict[str, Default]]]):
        self._source = table if callable(table) else dict(table)

    @property
    def _table(self) -> Dict[str, Default]:
        return self._source() if callable(self._source) else self._source

    def __getitem__(self, name: str) -> Default:
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def extended(self, **more: Default) -> "FlagDefaults":
        """This table plus (or overriding) ``more``: a derived model's table
        (read when used if this one is)."""
        if callable(self._source):
            return FlagDefaults(lambda: {**self._table, **more})
        return FlagDefaults({**self._table, **more})

    def describe(self, name: str) -> str:
        """The default as ``--help`` shows it."""
        value = self._table[name]
        if callable(value):
            return getattr(value, "__doc__", None) or "derived from other flags"
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)

    def help(self, name: str, text: str) -> str:
        """``text`` followed by ``(default: VALUE)`` from the table."""
        return f"{text} (default: {self.describe(name)})"

    def documented(self, add_args: Callable[[Any], None]) -> Callable[[Any], None]:
        """Decorate a model's ``add_args``: after it ran, the help of every
        flag it added (its own and its base model's, e.g. fairseq's
        Transformer's or BART's) whose ``dest`` this table holds ends with
        ``(default: VALUE)`` from the table. A flag is named once, in its
        ``add_argument``; a model that overrides fairseq's own defaults
        tables them like its own flags. A base ``add_args`` that is itself
        decorated is re-annotated with this table, not twice."""

        @functools.wraps(add_args)
        def add_args_with_defaults(parser):
            first_new = len(parser._actions)  # an argument group shares its parser's action list
            add_args(parser)
            table = self._table
            for action in parser._actions[first_new:]:
                if action.dest in table:
                    text = getattr(action, _HELP_TEXT, action.help or "")
                    setattr(action, _HELP_TEXT, text)
                    action.help = self.help(action.dest, text)

        return add_args_with_defaults

    def fill(self, args, **architecture_values: Default) -> None:
        """Set every flag of the table that ``args`` lacks or holds as
        ``None``: the architecture's value first, else the table's (an
        architecture value for a flag outside the table is a ``KeyError``).
        Derived defaults (callables) see the values filled before them, in
        table order."""
        table = self._table
        unknown = set(architecture_values) - set(table)
        if unknown:
            raise KeyError(f"architecture values for flags not in the model's table: {sorted(unknown)}")
        for name, default in table.items():
            if getattr(args, name, None) is not None:
                continue
            value = architecture_values.get(name, default)
            setattr(args, name, value(args) if callable(value) else value)


def derived(doc: str, function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A derived default with the text ``--help`` shows for it."""
    function.__doc__ = doc
    return function
