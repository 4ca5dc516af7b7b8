"""``mdsfair-train -h`` and ``mdsfair-generate -h``: mdsfair's short help, printed from
``mdsfair/cli_help_options.json`` (whose agreement with fairseq's parsers
``tests/test_cli_help_table.py`` checks); ``--help-all``: the fairseq command's own help.

That ``-h`` imports neither torch nor fairseq is checked in a fresh interpreter by
``tests/test_startup.py``."""

import pytest

from mdsfair import cli, cli_help


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
        "t5_v1_1",
        "longt5",
    ):
        fairseq_base, base, rows = tables.mdsfair["model"][name]
        assert (fairseq_base, base) == ("bart", component_model)
        assert not set(rows) & set(component_rows)
    assert tables.mdsfair["task"]["multidoc_summarization_sparse"][:2] == (None, "multidoc_summarization")


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
