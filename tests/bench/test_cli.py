"""sarp-bench's command line: argument errors and re-rendering a report."""

import argparse
import json
import re
from pathlib import Path

import pytest

from sarp.bench.cli import main, parser, run_options
from sarp.bench.metrics import LATER_FIELDS, new_row
from sarp.bench.results import load_results


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
    (["run", "--min-time", "-1"], "'-1' must be non-negative and finite"),
    (["run", "--min-time", "nan"], "'nan' must be non-negative and finite"),
    (["run", "--max-repeat", "0"], "'0' is not a positive integer"),
    (["run", "--out", __file__], f"'{__file__}' exists and is not a directory"),
    (["recovery", "--blocks", "-3"], "'-3' is not a positive integer"),
    (["recovery", "--repeat", "1.5"], "'1.5' is not a positive integer"),
    (["sweep", "--budgets", "x"], "'x' is not a non-negative integer"),
    (["sweep", "--scale", "0"], "'0' must be positive and finite"),
    (["run", "--expand", "0"], "'0' is not a positive integer"),
    (["recovery", "--block-tokens", "x"], "'x' is not a positive integer"),
    (["sweep", "--workloads", "mooncake:/nonexistent/trace"],
     "Mooncake trace '/nonexistent/trace' does not exist"),
    (["run", "--designs", "sarp,ssd-blockhash,sarp"], "'sarp' is listed twice"),
    (["run", "--sweep", "1,0,1"], "1 is listed twice"),
    (["recovery", "--backend", "memory"], "recovery needs a persistent backend"),
    (["run", "--out", f"{__file__}/sub"], f"'{__file__}/sub' cannot be created: '{__file__}' "
     "is a file"),
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


def test_a_results_directory_must_be_new_or_empty(tmp_path, capsys, no_runs):
    (tmp_path / "old.txt").write_text("an earlier run's file")
    with pytest.raises(SystemExit) as exc:
        main(["run", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert f"argument --out: '{tmp_path}' is not empty" in capsys.readouterr().err


@pytest.mark.parametrize("text, says", [
    ('{"timestamp": 1, "input_length": 1024, "hash_ids": [1, 2]}\n{"timest', ":2: not a JSON line"),
    ('{"timestamp": 1}\n', ":1: missing input_length, hash_ids"),
    ('{"timestamp": 1, "input_length": -5, "hash_ids": [1]}\n', ":1: timestamp must be"),
    ('[1, 2]\n', ":1: not a JSON object"),
    ("\n", "holds no request"),
])
def test_a_malformed_mooncake_trace_is_refused_before_the_run(text, says, tmp_path, capsys,
                                                              no_runs):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(text)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["run", "--workloads", f"mooncake:{trace}", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --workloads: " in err and says in err and "Traceback" not in err
    assert not out.exists()


def test_a_mooncake_trace_is_read_with_the_block_tokens_and_expansion_given(tmp_path):
    """--block-tokens and --expand reach the trace's reader: each full hashed block of 16
    tokens becomes 4 blocks (the partial last one is not indexed), and results.json says how
    the trace was read."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [
        {"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]},
        {"timestamp": 1, "input_length": 48, "output_length": 1, "hash_ids": [1, 2, 4]}]))
    name, out = f"mooncake:{trace}", tmp_path / "out"
    assert main(["run", "--workloads", name, "--designs", "sarp", "--backends", "memory",
                 "--sweep", "none", "--threads", "none", "--recovery-blocks", "none",
                 "--repeat", "1", "--min-time", "0", "--block-tokens", "16", "--expand", "4",
                 "--no-progress", "--out", str(out)]) == 0
    meta = load_results(out)["meta"]
    assert meta["options"]["mooncake"] == {"block_tokens": 16, "expand": 4}
    # hashed blocks 1, 2 and 4: 3 covers the partial end of the first input
    assert meta["workloads"][name]["unique_blocks"] == 4 * 3


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


def test_report_of_rows_without_their_metrics_fails(tmp_path, capsys):
    (tmp_path / "results.json").write_text(
        '{"meta": {}, "rows": [{"workload": "w", "design": "sarp", "backend": "memory"}]}')
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    assert exc.value.code == 2
    assert "row 0 lacks requests, throughput_rps, match_mean_us and" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_report_of_a_file_from_before_a_later_metric_marks_it_na(tmp_path):
    row = new_row("w", "sarp", "memory")
    for name in LATER_FIELDS:
        del row[name]
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}, "rows": [row]}))
    assert main(["report", str(tmp_path)]) == 0
    loaded = load_results(tmp_path)["rows"][0]
    for name in LATER_FIELDS:
        assert loaded[name] is None
        assert loaded["na"][name] == "not measured: the file predates the metric"
    assert "predates the metric" in (tmp_path / "report.md").read_text()


def test_a_run_cut_before_its_first_request_still_reports(tmp_path):
    """A time limit shorter than one request leaves zero throughput: the plots skip what a
    log scale cannot show, and the report is written."""
    out = tmp_path / "res"
    assert main(["run", "--workloads", "synthetic/codeact", "--designs", "sarp",
                 "--backends", "memory", "--scale", "0.03", "--repeat", "1", "--threads", "none",
                 "--sweep", "none", "--recovery-blocks", "none", "--time-limit", "1e-9",
                 "--out", str(out), "--no-progress"]) == 0
    assert (out / "report.md").exists() and (out / "throughput.png").exists()


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


@pytest.mark.parametrize("args, min_time, max_repeat, repeat", [
    (["run"], 1.0, 15, 3),
    (["run", "--quick"], 0.25, 9, 5),
    (["run", "--quick", "--min-time", "0", "--repeat", "2"], 0.0, 9, 2),
    (["run", "--min-time", "2.5", "--max-repeat", "7"], 2.5, 7, 3),
])
def test_short_rows_are_repeated_to_a_minimum_replay_time_by_default(args, min_time, max_repeat,
                                                                     repeat):
    opts = run_options(parser().parse_args(args))
    assert (opts.min_time, opts.max_repeat, opts.repeat) == (min_time, max_repeat, repeat)


def _documented_commands() -> list[str]:
    """Every ``sarp-bench`` command the README and docs/ quote (in backticks, across line
    breaks), but for synopses, which name options in brackets."""
    root = Path(__file__).resolve().parents[2]
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for m in re.finditer(r"`(sarp-bench [^`]*)`", doc.read_text()):
            command = " ".join(m.group(1).split())
            if "[" not in command:
                found.append(command)
    return found


@pytest.mark.parametrize("command", _documented_commands())
def test_every_command_the_documents_quote_is_accepted(command, tmp_path, no_runs):
    # the documents' placeholders: a directory, a backend
    filled = {"DIR": str(tmp_path), "PATH": str(tmp_path), "B": "odirect"}
    args = [filled.get(a, a) for a in command.split()[1:]]
    a = parser().parse_args(args)
    if a.command == "run":
        run_options(a)
