"""Registry of release formats: ``mdsfair-convert`` and :func:`~.driver.convert` read it.

A format module registers its generator with :func:`register_converter`::

    def add_wcep_arguments(parser): ...          # the format's own CLI flags

    @register_converter("wcep", add_arguments=add_wcep_arguments)
    def iter_wcep(inputs, split="train", *, prepend_titles=False, ...,
                  options=ConversionOptions()):
        \"\"\"WCEP JSONL -> contract clusters.\"\"\"   # first line: the CLI help
        session = ConversionSession(options, "wcep", split, inputs)
        ...
        yield from session.clusters(iter_json_records(session.paths, session), build)

The generator takes ``inputs`` and ``split`` positionally and everything else
as keyword-only options: its own, and ``options``, the
:class:`~.common.ConversionOptions` every format shares (the bad-input policy
and the report), which it opens its :class:`~.common.ConversionSession` with;
:func:`format_options` lists the format's own options (the CLI passes exactly
those on), and the first line of its docstring is the subcommand's help.
Importing :mod:`mdsfair.preprocess.converters`
imports every module of the package, so a new format module needs no other
change to appear in the CLI.
"""

from __future__ import annotations

import argparse
import inspect
import re
from typing import Any, Callable, Dict, Iterator, List, Optional

ConverterFunction = Callable[..., Iterator[Dict[str, Any]]]
ArgumentAdder = Callable[[argparse.ArgumentParser], None]

# Format name -> generator of contract clusters, in registration order.
CONVERTERS: Dict[str, ConverterFunction] = {}
# Format name -> function adding the format's own flags to its subcommand (None: no own flags).
CONVERTER_ARGUMENTS: Dict[str, Optional[ArgumentAdder]] = {}

# Parameters the driver fills itself; every other keyword-only parameter is a format option.
DRIVER_PARAMETERS = frozenset({"inputs", "split", "options"})
_FORMAT_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def register_converter(
    name: str, add_arguments: Optional[ArgumentAdder] = None
) -> Callable[[ConverterFunction], ConverterFunction]:
    """Decorator registering a cluster generator as release format ``name``.

    ``add_arguments(parser)`` adds the format's own flags to its
    ``mdsfair-convert NAME`` subcommand; their ``dest`` must be the generator's
    keyword-only parameter names. Registering a name twice, a name that is not
    a lower-case identifier, or a generator without the driver's parameters
    (``inputs``, ``split``, ``options``) raises ValueError."""
    if not _FORMAT_NAME.match(name):
        raise ValueError(f"converter name {name!r} must be a lower-case identifier")

    def wrapper(function: ConverterFunction) -> ConverterFunction:
        if name in CONVERTERS:
            raise ValueError(
                f"converter {name!r} registered twice ({CONVERTERS[name].__module__}."
                f"{CONVERTERS[name].__qualname__} and {function.__module__}.{function.__qualname__})"
            )
        parameters = inspect.signature(function).parameters
        missing = sorted(DRIVER_PARAMETERS - set(parameters))
        if missing:
            raise ValueError(f"converter {name!r} ({function.__qualname__}) lacks the parameters {missing}")
        if not (function.__doc__ or "").strip():
            raise ValueError(f"converter {name!r} ({function.__qualname__}) needs a docstring (its CLI help)")
        CONVERTERS[name] = function
        CONVERTER_ARGUMENTS[name] = add_arguments
        return function

    return wrapper


def get_converter(format_name: str) -> ConverterFunction:
    """The generator registered as ``format_name``; ValueError naming the known formats otherwise."""
    try:
        return CONVERTERS[format_name]
    except KeyError:
        raise ValueError(f"unknown format {format_name!r}; choose from {sorted(CONVERTERS)}") from None


def format_options(format_name: str) -> List[str]:
    """Keyword options a format accepts besides inputs, split and options (its own options)."""
    signature = inspect.signature(get_converter(format_name))
    return [
        name
        for name, parameter in signature.parameters.items()
        if name not in DRIVER_PARAMETERS
        and not name.startswith("_")
        and parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
