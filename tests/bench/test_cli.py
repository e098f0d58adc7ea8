"""sarp-bench's command line: argument errors and re-rendering a report."""

import argparse

import pytest

from sarp.bench.cli import main, parser


@pytest.fixture
def no_runs(monkeypatch):
    """A value that gets past the parser fails the test at once instead of starting a run."""
    def refuse(*args):
        raise AssertionError("the bad value was accepted")
    for name in ("run", "run_sweep", "run_recovery"):
        monkeypatch.setattr(f"sarp.bench.cli.{name}", refuse)


@pytest.mark.parametrize("args, says", [
    (["run", "--workloads", "synthetic/nope"], "unknown workload 'synthetic/nope'"),
    (["run", "--designs", "sarp,nope"], "unknown design 'nope'"),
    (["run", "--backends", "floppy"], "unknown backend 'floppy'"),
    (["run", "--scale", "-1"], "'-1' must be positive and finite"),
    (["recovery", "--designs", "nope"], "unknown design 'nope'"),
    (["recovery", "--backend", "bogus"], "unknown backend 'bogus' (choose from memory,"),
    (["recovery", "--workload", "bogus"], "unknown workload 'bogus' (choose from synthetic/"),
    (["run", "--threads", "abc"], "'abc' is not a positive integer"),
    (["run", "--threads", "0"], "'0' is not a positive integer"),
    (["run", "--repeat", "x"], "'x' is not a positive integer"),
    (["run", "--repeat", "0"], "'0' is not a positive integer"),
    (["run", "--sweep", "1.5"], "'1.5' is not a non-negative integer"),
    (["run", "--recovery-blocks", "inf"], "'inf' is not a positive integer"),
    (["run", "--seed", "-1"], "'-1' is not a non-negative integer"),
    (["run", "--scale", "inf"], "'inf' must be positive and finite"),
    (["run", "--time-limit", "nan"], "'nan' must be positive and finite"),
    (["run", "--radix-cap-share", "0"], "'0' must be positive and finite"),
    (["run", "--out", __file__], f"'{__file__}' exists and is not a directory"),
    (["recovery", "--blocks", "-3"], "'-3' is not a positive integer"),
    (["recovery", "--repeat", "1.5"], "'1.5' is not a positive integer"),
    (["sweep", "--budgets", "x"], "'x' is not a non-negative integer"),
    (["sweep", "--scale", "0"], "'0' must be positive and finite"),
    (["sweep", "--workloads", "mooncake:/nonexistent/trace"],
     "Mooncake trace '/nonexistent/trace' does not exist"),
])
def test_bad_values_get_one_clear_line(args, says, capsys, no_runs):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {args[1]}: {says}" in err
    assert "invalid" not in err  # argparse's "invalid check_backend value", "invalid int value"


def test_a_mooncake_path_must_be_a_readable_file(tmp_path, capsys, no_runs):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--workloads", f"mooncake:{tmp_path}"])
    assert exc.value.code == 2
    assert f"argument --workloads: Mooncake trace '{tmp_path}' is not a readable file" in \
        capsys.readouterr().err


def test_every_option_of_every_command_has_help():
    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        for action in command._actions:
            assert action.help, f"{name} {action.dest}"


def test_report_of_a_directory_without_results_fails(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    assert exc.value.code != 0
    assert "results.json" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{}", "[]", "not json", '{"meta": {}, "rows": {}}'])
def test_report_of_a_file_that_is_not_results_fails(text, tmp_path, capsys):
    (tmp_path / "results.json").write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument dir: '{tmp_path / 'results.json'}' is not a sarp-bench results file" in err


def test_run_then_report_rerenders(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["run", "--workloads", "synthetic/codeact", "--designs", "sarp,ssd-blockhash",
                 "--backends", "memory", "--scale", "0.03", "--repeat", "1", "--threads", "none",
                 "--sweep", "none", "--recovery-blocks", "none", "--out", str(out),
                 "--no-progress"]) == 0
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "SARP" in text and "SSD-BlockHash" in text
