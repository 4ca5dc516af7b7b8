"""``mdsfair-train -h`` and ``mdsfair-generate -h``: mdsfair's short help, printed from
``mdsfair/cli_help_options.json``, which must be what fairseq's parsers list with mdsfair
registered; ``--help-all``: the fairseq command's own help.

That ``-h`` imports neither torch nor fairseq is checked in a fresh interpreter by
``tests/test_startup.py``."""

import os
import subprocess
import sys

import fairseq
import pytest

from mdsfair import cli, cli_help
from tests.utils import REPO_ROOT


def test_the_table_of_options_is_what_fairseqs_parsers_list_with_mdsfair_registered():
    """Read in a fresh interpreter (``python -m mdsfair.cli_help`` exits 1 when the table
    differs), so that nothing another test registered in this process is read."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    finished = subprocess.run(
        [sys.executable, "-m", "mdsfair.cli_help"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "cli_help_options.json is current" in finished.stdout
    tables = cli_help.stored_tables()
    assert tables.fairseq_version == fairseq.__version__
    with open(cli_help.OPTIONS_FILE, encoding="utf-8") as handle:
        assert handle.read() == tables.to_json()


def test_the_table_holds_every_mdsfair_task_model_criterion_and_architecture():
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    tables = cli_help.stored_tables()
    assert {"multidoc_summarization", "multidoc_summarization_sparse", "paragraph_ranking"} <= set(
        tables.mdsfair["task"]
    )
    assert {"sparse_kl", "paragraph_ranking"} <= set(tables.mdsfair["criterion"])
    assert set(tables.mdsfair["task"]) <= set(TASK_REGISTRY) and set(tables.mdsfair["criterion"]) <= set(
        CRITERION_REGISTRY
    )
    archs = [arch for model in tables.architectures.values() for arch in model]
    assert {"multidoc_bart_base", "led_tiny", "primera", "pagesum_bart_large", "hiertransformer_hiersumm"} <= set(archs)
    assert set(archs) <= set(ARCH_MODEL_REGISTRY)
    # the component flags are the component models' own; BART's are fairseq's bart's
    base, multidoc_rows = cli_help.mdsfair_options(tables, "model", "multidoc_bart")
    assert "--encoder-self-attention" in {flag for row in multidoc_rows for flag in cli_help.flags_of(row)}
    assert base == "bart"
    assert tables.mdsfair["criterion"]["sparse_kl"][0] == "label_smoothed_cross_entropy"


def test_a_fairseq_class_stores_only_the_options_beyond_its_fairseq_base_and_reads_back_whole():
    from fairseq.models import MODEL_REGISTRY

    tables = cli_help.stored_tables()
    for name, base in (("transformer_pointer_generator", "transformer"), ("bart", "transformer")):
        assert tables.fairseq["model"][name][0] == base
        stored = tables.fairseq["model"][name][1]
        assert stored and not set(stored) & set(cli_help.fairseq_options(tables, "model", base))
        assert cli_help.fairseq_options(tables, "model", name) == cli_help.rows_of(MODEL_REGISTRY[name])
    assert tables.fairseq["model"]["transformer"][0] is None


def test_a_class_options_are_its_bases_each_as_the_class_describes_it_then_its_own():
    base_rows = (("--a A", "a"), ("-b B, --bee B", "b"), ("--c", "c"))
    own_rows = (("--new N", "new"), ("--bee B", "b, as the class says"))
    assert cli_help.extended_rows(base_rows, own_rows) == (
        ("--a A", "a"),
        ("--bee B", "b, as the class says"),
        ("--c", "c"),
        ("--new N", "new"),
    )
    assert cli_help.extended_rows(base_rows, ()) == base_rows


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
    assert cli_help.table_entry("mine", registry, fairseq_table, full_rows) == ("extended", (("--mine MINE", "mine"),))
    assert fairseq_table == {
        "base": (None, (("--first FIRST", "first"),)),
        "extended": ("base", (("--own OWN", "own"),)),
    }
    with pytest.raises(
        ValueError, match=r"cli_help\.py: the options of fairseq's reordered .* are not those of its base"
    ):
        cli_help.table_entry("mine_reordered", registry, fairseq_table, full_rows)


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
        _, rows = cli_help.table_entry(name, registry, tables.fairseq["model"], full_rows)
        tables.mdsfair["model"][name] = (None, None, rows)
    for name in registry:
        cli_help.store_beyond_mdsfair_base(tables, "model", name, registry, full_rows)
    preset = ("--preset PRESET", "preset (default: 2)")
    assert tables.mdsfair["model"]["sibling"] == (None, "mdsfair.models.fake.Base", (preset,))
    assert tables.mdsfair["model"]["reordered"] == (None, None, (preset, ("--shared SHARED", "shared")))
    base_rows = (("--shared SHARED", "shared"), ("--preset PRESET", "preset (default: 1)"))
    assert tables.mdsfair_bases["model"] == {"mdsfair.models.fake.Base": (None, None, base_rows)}
    assert cli_help.mdsfair_options(tables, "model", "sibling") == (None, full_rows["sibling"])


def test_the_bart_based_families_store_only_what_they_set_otherwise_than_the_component_model():
    tables = cli_help.stored_tables()
    component_model = "mdsfair.models.component_model.ComponentBARTModel"
    _, _, component_rows = tables.mdsfair_bases["model"][component_model]
    for name in (
        "multidoc_bart",
        "hat_bart",
        "hepos_bart",
        "hierencdec_bart",
        "led",
        "lobart",
        "sparse_bart",
        "pegasus",
    ):
        fairseq_base, base, rows = tables.mdsfair["model"][name]
        assert (fairseq_base, base) == ("bart", component_model)
        assert not set(rows) & set(component_rows)
    assert tables.mdsfair["model"]["longt5"] == (None, "t5_v1_1", ())
    assert tables.mdsfair["task"]["multidoc_summarization_sparse"][:2] == (None, "multidoc_summarization")


def test_a_common_option_fairseq_does_not_have_is_refused_when_the_table_is_read(monkeypatch):
    monkeypatch.setitem(cli_help.COMMON_OPTIONS, "mdsfair-generate", ("--beam", "--no-such-option"))
    with pytest.raises(ValueError, match=r"cli_help\.py: COMMON_OPTIONS\['mdsfair-generate'\] names \['--no-such"):
        cli_help.collect_options()


def invocations(rows):
    return [invocation for invocation, _ in rows]


def test_train_help_lists_the_task_the_architectures_and_the_common_options(capsys):
    cli.train_main(["--help"])
    text = capsys.readouterr().out
    tables = cli_help.stored_tables()
    assert text.startswith("usage: mdsfair-train DATA --task TASK --arch ARCH")
    for invocation in invocations(cli_help.mdsfair_options(tables, "task", "multidoc_summarization")[1]):
        assert f"\n  {invocation}" in text
    for invocation in invocations(tables.common["mdsfair-train"]):
        assert f"\n  {invocation}" in text
    for archs in tables.architectures.values():
        assert all(arch in text for arch in archs)
    assert "mdsfair-train --help-all" in text
    # no architecture named: no model's options
    assert "--encoder-self-attention" not in text
    assert len(text.splitlines()) < 200


def test_train_help_of_an_architecture_lists_its_models_options_and_the_fairseq_models(capsys):
    cli.train_main(["-h", "--arch", "led_tiny", "--criterion", "sparse_kl", "--task", "multidoc_summarization_sparse"])
    text = capsys.readouterr().out
    tables = cli_help.stored_tables()
    base, own = cli_help.mdsfair_options(tables, "model", "led")
    assert "options of --arch led_tiny (model led):" in text and "from fairseq's bart:" in text
    for invocation in invocations(own) + invocations(cli_help.fairseq_options(tables, "model", base)):
        assert f"\n  {invocation}" in text, invocation
    for invocation in invocations(cli_help.mdsfair_options(tables, "task", "multidoc_summarization_sparse")[1]):
        assert f"\n  {invocation}" in text, invocation
    for invocation in invocations(cli_help.fairseq_options(tables, "criterion", "label_smoothed_cross_entropy")):
        assert f"\n  {invocation}" in text, invocation
    model_section = text[text.index("options of --arch led_tiny") : text.index("options of --criterion")]
    flags = [line.split()[0].rstrip(",") for line in model_section.splitlines() if line.startswith("  -")]
    assert len(flags) == len(set(flags))


def test_a_fairseq_flag_a_model_describes_otherwise_is_listed_once_with_the_models_help(capsys):
    cli.train_main(["-h", "--arch", "hiertransformer_tiny"])
    text = capsys.readouterr().out
    tables = cli_help.stored_tables()
    base, own = cli_help.mdsfair_options(tables, "model", "hiertransformer")
    fairseq_rows = cli_help.fairseq_options(tables, "model", base)
    changed = [row for row in own if row[0] in invocations(fairseq_rows)]
    assert changed and all(row not in fairseq_rows for row in changed)  # the help is the model's own
    model_section = text[text.index("options of --arch hiertransformer_tiny") : text.index("common fairseq-train")]
    flags = [line.split()[0].rstrip(",") for line in model_section.splitlines() if line.startswith("  -")]
    assert len(flags) == len(set(flags))
    assert set(flags) == {flag for row in own + fairseq_rows for flag in cli_help.flags_of(row)[:1]}


def test_train_help_of_a_fairseq_architecture_and_of_unknown_names(capsys):
    cli.train_main(["--arch", "transformer", "--help"])
    text = capsys.readouterr().out
    assert "options of --arch transformer (fairseq's model transformer):" in text
    assert "\n  --encoder-layers" in text
    cli.train_main(["--help", "--arch", "no_such_arch", "--task", "translation", "--criterion", "cross_entropy"])
    text = capsys.readouterr().out
    assert "--arch no_such_arch: not an architecture of mdsfair" in text
    assert "--task translation: not one of mdsfair's; mdsfair-train --help-all" in text
    assert "--criterion cross_entropy: not one of mdsfair's" in text


def test_generate_help_lists_the_task_and_the_common_generation_options(capsys):
    cli.generate_main(["--help", "--task", "paragraph_ranking"])
    text = capsys.readouterr().out
    tables = cli_help.stored_tables()
    assert text.startswith("usage: mdsfair-generate DATA --task TASK --path CHECKPOINT")
    for invocation in invocations(cli_help.mdsfair_options(tables, "task", "paragraph_ranking")[1]):
        assert f"\n  {invocation}" in text
    for invocation in invocations(tables.common["mdsfair-generate"]):
        assert f"\n  {invocation}" in text
    assert "mdsfair-generate --help-all" in text and "--arch" not in text


@pytest.mark.parametrize("main, prog", [(cli.train_main, "mdsfair-train"), (cli.generate_main, "mdsfair-generate")])
def test_help_all_prints_the_fairseq_commands_own_help(main, prog, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--help-all"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {prog}")
    assert "--distributed-world-size" in text and "--user-dir" in text and "--help-all" not in text
    assert len(text.splitlines()) > 300


def test_which_command_lines_ask_for_the_short_help():
    assert cli_help.asks_short_help(["-h"]) and cli_help.asks_short_help(["data", "--arch", "led", "--help"])
    assert not cli_help.asks_short_help(["--help-all"]) and not cli_help.asks_short_help(["--help", "--help-all"])
    assert not cli_help.asks_short_help(["data", "--arch", "led"])
    assert cli_help.with_full_help(["data", "--help-all"]) == ["data", "--help"]
    assert cli_help.given(["--arch", "a", "--arch=b"], "--arch") == "b"
    assert cli_help.given(["-a", "led"], "--arch", "-a") == "led"


def test_option_lines_are_laid_out_as_argparse_lays_them_out():
    lines = cli_help.option_lines([("--beam N", "beam size " * 12), ("--a-very-long-option-name VALUE", "x")], 80)
    assert lines[0].startswith("  --beam N              beam size")
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].startswith(" " * 24) and lines[1][24] != " "
    assert lines[-2:] == ["  --a-very-long-option-name VALUE", " " * 24 + "x"]


def test_the_tables_read_back_from_json_as_they_were_written():
    rows = (("--f N", 'help "quoted" \\ text'),)
    tables = cli_help.OptionTables(
        fairseq_version="0.12.3",
        mdsfair={"model": {"mine": ("bart", None, rows), "sibling": ("bart", "pkg.Base", ())}},
        mdsfair_bases={"model": {"pkg.Base": ("bart", None, rows)}},
        fairseq={"model": {"bart": (None, (("--g", "g"),))}},
        architectures={"mine": ("mine_tiny",)},
        fairseq_architectures={"bart": ("bart_base", "bart_large")},
        common={"mdsfair-train": rows},
    )
    assert cli_help.OptionTables.from_json(tables.to_json()) == tables
