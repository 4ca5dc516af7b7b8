"""The table of options that mdsfair's short help prints
(``mdsfair/cli_help_options.json``, written by ``python -m mdsfair.cli_help_table --write``):
what fairseq's parsers list with mdsfair registered, each class stored as the options
beyond the class it extends, and refused where it cannot be stored so."""

import os
import subprocess
import sys

import fairseq
import pytest

from mdsfair import cli_help, cli_help_table
from tests.utils import REPO_ROOT


def test_the_table_of_options_is_what_fairseqs_parsers_list_with_mdsfair_registered():
    """Read in a fresh interpreter (``python -m mdsfair.cli_help_table`` exits 1 when the table
    differs), so that nothing another test registered in this process is read."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    finished = subprocess.run(
        [sys.executable, "-m", "mdsfair.cli_help_table"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "cli_help_options.json is current" in finished.stdout
    tables = cli_help.stored_tables()
    assert tables.fairseq_version == fairseq.__version__
    with open(cli_help.OPTIONS_FILE, encoding="utf-8") as handle:
        assert handle.read() == tables.to_json()


def test_a_fairseq_class_stores_only_the_options_beyond_its_fairseq_base_and_reads_back_whole():
    from fairseq.models import MODEL_REGISTRY

    tables = cli_help.stored_tables()
    for name, base in (("transformer_pointer_generator", "transformer"), ("bart", "transformer")):
        assert tables.fairseq["model"][name][0] == base
        stored = tables.fairseq["model"][name][1]
        assert stored and not set(stored) & set(cli_help.fairseq_options(tables, "model", base))
        assert cli_help.fairseq_options(tables, "model", name) == cli_help_table.rows_of(MODEL_REGISTRY[name])
    assert tables.fairseq["model"]["transformer"][0] is None


def registered_class(name, module, add_args, base=object):
    """A class as fairseq's registries hold it."""
    return type(name, (base,), {"__module__": module, "add_args": staticmethod(add_args)})


def test_a_fairseq_class_whose_options_do_not_extend_its_bases_is_refused_when_the_table_is_read():
    def base_args(parser):
        parser.add_argument("--first", help="first")

    def extended_args(parser):
        base_args(parser)
        parser.add_argument("--own", help="own")

    def reordered_args(parser):
        parser.add_argument("--own", help="own")
        base_args(parser)

    def mdsfair_args(parser):
        parser.add_argument("--mine", help="mine")
        extended_args(parser)

    base = registered_class("Base", "fairseq.models.fake", base_args)
    extended = registered_class("Extended", "fairseq.models.fake", extended_args, base)
    reordered = registered_class("Reordered", "fairseq.models.fake", reordered_args, base)
    registry = {
        "base": base,
        "extended": extended,
        "reordered": reordered,
        "mine": registered_class("Mine", "mdsfair.models.fake", mdsfair_args, extended),
        "mine_reordered": registered_class("MineReordered", "mdsfair.models.fake", mdsfair_args, reordered),
    }
    fairseq_table, full_rows = {}, {}
    assert cli_help_table.table_entry("mine", registry, fairseq_table, full_rows) == (
        "extended",
        (("--mine MINE", "mine"),),
    )
    assert fairseq_table == {
        "base": (None, (("--first FIRST", "first"),)),
        "extended": ("base", (("--own OWN", "own"),)),
    }
    with pytest.raises(
        ValueError, match=r"cli_help_table\.py: the options of fairseq's reordered .* are not those of its base"
    ):
        cli_help_table.table_entry("mine_reordered", registry, fairseq_table, full_rows)


def test_a_class_is_stored_beyond_its_mdsfair_base_where_its_options_read_back_so():
    def base_args(parser):
        parser.add_argument("--shared", help="shared")
        parser.add_argument("--preset", type=int, default=1, help="preset")

    def sibling_args(parser):  # the base's options, another default
        parser.add_argument("--shared", help="shared")
        parser.add_argument("--preset", type=int, default=2, help="preset")

    def reordered_args(parser):  # not the base's order: stored whole
        parser.add_argument("--preset", type=int, default=2, help="preset")
        parser.add_argument("--shared", help="shared")

    base = registered_class("Base", "mdsfair.models.fake", base_args)
    registry = {
        "reordered": registered_class("Reordered", "mdsfair.models.fake", reordered_args, base),
        "sibling": registered_class("Sibling", "mdsfair.models.fake", sibling_args, base),
    }
    tables = cli_help.OptionTables("0", {"model": {}}, {"model": {}}, {"model": {}}, {}, {}, {})
    full_rows = {}
    for name in registry:
        _, rows = cli_help_table.table_entry(name, registry, tables.fairseq["model"], full_rows)
        tables.mdsfair["model"][name] = (None, None, rows)
    for name in registry:
        cli_help_table.store_beyond_mdsfair_base(tables, "model", name, registry, full_rows)
    preset = ("--preset PRESET", "preset (default: 2)")
    assert tables.mdsfair["model"]["sibling"] == (None, "mdsfair.models.fake.Base", (preset,))
    assert tables.mdsfair["model"]["reordered"] == (None, None, (preset, ("--shared SHARED", "shared")))
    base_rows = (("--shared SHARED", "shared"), ("--preset PRESET", "preset (default: 1)"))
    assert tables.mdsfair_bases["model"] == {"mdsfair.models.fake.Base": (None, None, base_rows)}
    assert cli_help.mdsfair_options(tables, "model", "sibling") == (None, full_rows["sibling"])


def test_a_common_option_fairseq_does_not_have_is_refused_when_the_table_is_read(monkeypatch):
    monkeypatch.setitem(cli_help_table.COMMON_OPTIONS, "mdsfair-generate", ("--beam", "--no-such-option"))
    with pytest.raises(
        ValueError, match=r"cli_help_table\.py: COMMON_OPTIONS\['mdsfair-generate'\] names \['--no-such"
    ):
        cli_help_table.collect_options()
