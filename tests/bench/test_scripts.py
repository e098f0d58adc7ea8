"""The command lines of the scripts in bench/: argument errors and help."""

import importlib.util
import multiprocessing
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def script(name: str):
    """The module of ``bench/NAME.py`` (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_trace(tmp_path: Path, tokens_per_id: int) -> Path:
    """A Mooncake trace of 6 requests, request i of 4 + i hashed blocks of ``tokens_per_id``
    tokens each, every one a prefix of the next."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {i}, "input_length": {tokens_per_id * (4 + i)}, "output_length": 16, '
        f'"hash_ids": {list(range(4 + i))}}}\n' for i in range(6)))
    return trace


def refusal(capsys, name: str, args: list[str]) -> str:
    """What ``bench/NAME.py`` printed on stderr when it refused ``args`` (exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        script(name).main(args)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_lagging_worker_help_shows_the_whole_first_sentence(capsys):
    with pytest.raises(SystemExit) as exc:
        script("lagging_worker").main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "print SARP's hit-rate loss and its segment retrievals." in out


def test_lagging_worker_names_an_unknown_workload_and_the_choices(capsys):
    err = refusal(capsys, "lagging_worker", ["bogus"])
    assert "argument workloads: unknown workload 'bogus' (choose from synthetic/" in err
    assert "check_workload" not in err


def test_worker_thread_compares_both_modes_on_a_small_trace(tmp_path, capsys):
    trace = small_trace(tmp_path, 16)
    script("worker_thread").main([f"mooncake:{trace}", "--repeat", "1"])
    row = capsys.readouterr().out.splitlines()[2].split("|")
    assert row[1].strip() == f"mooncake:{trace}" and row[2].strip() == "memory"
    assert float(row[3]) > 0 and float(row[4]) > 0


def test_routing_state_counts_a_small_trace(tmp_path, capsys):
    """Every request is matched and inserted; the counters are those of the replay."""
    trace = small_trace(tmp_path, 512)
    script("routing_state").main([f"mooncake:{trace}"])
    lines = capsys.readouterr().out.splitlines()
    counters = {k: float(v.replace(",", "")) for k, v in (x.split() for x in lines[1:])}
    assert counters["requests"] == 6 and counters["unique_blocks"] == 9
    assert counters["query_windows"] >= 5 and counters["segment_retrievals"] >= 5
    assert counters["live_refs"] <= counters["arena_refs_used"]
    assert 1 <= counters["longest_list"] <= counters["live_refs"]
    assert counters["routing_bytes"] > 0 and counters["segments"] >= 1
    err = refusal(capsys, "routing_state", ["bogus"])
    assert "argument workloads: unknown workload 'bogus'" in err


def test_hot_prefix_lists_every_copy_under_the_shared_keys(tmp_path):
    """Each request's copy of the shared window is listed at its routing points before the
    divergence, so the longest list holds one reference per request; a row per doubling."""
    rows = script("hot_prefix").hot_prefix(tmp_path, 40, 100)
    assert [r["requests"] for r in rows] == [5, 10, 20, 40]
    assert [r["longest_list"] for r in rows] == [5, 10, 20, 40]
    assert all(r["match_us"] > 0 and r["insert_us"] > 0 for r in rows)


@pytest.mark.parametrize("option, value, says", [
    ("--records", "-5", "'-5' is not a positive integer"),
    ("--sizes", "0", "'0' is not a positive integer"),
    ("--sizes", str(4 << 20), f"'{4 << 20}' is not below {2 << 20} bytes"),
    ("--reads", "x", "'x' is not a positive integer"),
    ("--puts", "0", "'0' is not a positive integer"),
    ("--repeats", "1.5", "'1.5' is not a positive integer"),
    ("--engines", "floppy", "invalid choice: 'floppy'"),
])
def test_backends_benchmark_refuses_bad_values_naming_the_option(option, value, says, tmp_path,
                                                                  capsys):
    err = refusal(capsys, "backends", [option, value, "--out", str(tmp_path)])
    assert f"argument {option}: {says}" in err
    assert not any(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("option, value, says", [
    ("--threads", "0", "'0' is not a positive integer"),
    ("--scale", "inf", "must be positive and finite"),
    ("--workload", "bogus", "unknown workload 'bogus'"),
    ("--backend", "bogus", "bogus"),
    ("--design", "bogus", "invalid choice: 'bogus'"),
])
def test_threads_profile_refuses_bad_values_naming_the_option(capsys, option, value, says):
    err = refusal(capsys, "threads_profile", [option, value, "--out", "unused"])
    assert f"argument {option}: " in err and says in err


@pytest.mark.parametrize("name, args, says", [
    ("worker_thread", ["bogus"], "argument workloads: unknown workload 'bogus'"),
    ("worker_thread", ["trace/magagent", "--backends", "floppy"],
     "argument --backends: unknown backend 'floppy'"),
    ("worker_thread", ["trace/magagent", "--repeat", "0"],
     "argument --repeat: '0' is not a positive integer"),
    ("hot_prefix", ["--requests", "0"], "argument --requests: '0' is not a positive integer"),
    ("hot_prefix", ["--prefix-blocks", "-1"],
     "argument --prefix-blocks: '-1' is not a positive integer"),
    ("hot_prefix", ["--prefix-blocks", "128"],
     "argument --prefix-blocks: 128 ends on a window boundary"),
    ("repeat_stability", ["--min-times", "0,-1"],
     "argument --min-times: '-1' must be non-negative and finite"),
    ("repeat_stability", ["--runs", "0"], "argument --runs: '0' is not a positive integer"),
    ("repeat_stability", ["--baseline", "sarp"], "argument --baseline: invalid choice: 'sarp'"),
    ("repeat_stability", ["--backends", "floppy"],
     "argument --backends: unknown backend 'floppy'"),
    ("replay_overhead", ["bogus"], "argument workload: unknown workload 'bogus'"),
    ("replay_overhead", ["trace/magagent", "--repeat", "0"],
     "argument --repeat: '0' is not a positive integer"),
    ("device_queue", ["--rounds", "0"], "argument --rounds: '0' is not a positive integer"),
    ("device_queue", ["--file-mib", "-1"], "argument --file-mib: '-1' is not a positive integer"),
    ("device_queue", ["--dir", "/nonexistent/dir"],
     "argument --dir: '/nonexistent/dir' is not a directory"),
])
def test_scripts_refuse_bad_values_naming_the_argument(capsys, name, args, says):
    assert says in refusal(capsys, name, args)


def test_backends_benchmark_refuses_an_out_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert "argument --out: " in refusal(capsys, "backends", ["--out", str(tmp_path / "f")])


def test_repeat_stability_prints_each_runs_ratio_and_the_spread(capsys):
    script("repeat_stability").main(["--workloads", "synthetic/ultrachat", "--backends",
                                     "memory", "--runs", "2", "--scale", "0.05",
                                     "--min-times", "0,0.05", "--max-repeat", "4"])
    lines = capsys.readouterr().out.splitlines()
    row = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert row[:2] == ["synthetic/ultrachat", "memory"]
    first, second = row[2], row[3]
    assert first.endswith("3/3, 3/3")  # --min-time 0: exactly --repeat
    ratios = [float(x) for x in first.split(" (")[0].split()]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    reps = [int(x) for pair in second.split("; ")[1].split(", ") for x in pair.split("/")]
    assert all(3 <= r <= 4 for r in reps)
    assert lines[-2].startswith("--min-time 0: spread median")


def test_cpu_noise_runs_only_inside_its_block():
    mod = script("repeat_stability")
    with mod.cpu_noise(True) as _:
        procs = multiprocessing.active_children()
        assert len(procs) == mod.NOISE_PROCESSES and all(p.is_alive() for p in procs)
    assert not multiprocessing.active_children()
    with mod.cpu_noise(False):
        assert not multiprocessing.active_children()


def test_replay_overhead_times_both_counter_sets_on_a_small_trace(tmp_path, capsys):
    trace = small_trace(tmp_path, 16)
    script("replay_overhead").main([f"mooncake:{trace}", "--repeat", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"mooncake:{trace}: 6 requests, median of 3 replays"
    for line, counters in zip(lines[1:], (3, 7), strict=True):
        assert line.strip().startswith(f"{counters} counters per match: ")
        assert float(line.split(": ")[1].split()[0]) > 0


def test_device_queue_prints_a_row_per_read_count(tmp_path, capsys):
    script("device_queue").main(["--dir", str(tmp_path), "--rounds", "3", "--file-mib", "1"])
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2", "| 3", "| 4"]
    assert all(float(r.split(" | ")[3].rstrip(" |")) > 0 for r in rows)
    assert list(tmp_path.iterdir()) == []  # its file and directory are gone
