"""sarp-bench's command line: argument errors and re-rendering a report."""

import pytest

from sarp.bench.cli import main


@pytest.mark.parametrize("args, named", [
    (["run", "--workloads", "synthetic/nope"], "--workloads"),
    (["run", "--designs", "sarp,nope"], "--designs"),
    (["run", "--backends", "floppy"], "--backends"),
    (["run", "--scale", "-1"], "--scale"),
    (["recovery", "--designs", "nope"], "--designs"),
])
def test_unknown_names_exit_nonzero_naming_the_argument(args, named, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code != 0
    assert named in capsys.readouterr().err


def test_report_of_a_directory_without_results_fails(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    assert exc.value.code != 0
    assert "results.json" in capsys.readouterr().err


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
