"""Benchmark workloads: synthetic datasets, replay order, the shipped trace, Mooncake traces."""

import json
import os
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from sarp.bench import iter_requests, load_trace, read_mooncake, synthetic, write_mooncake
from sarp.bench.synthetic import NAMES
from sarp.bench.trace import SUBSETS, read_text_trace
from sarp.bench.workloads import same_workload, workload_stats

SHARED = Path(
    os.environ.get("SARP_WORKLOADS", Path(__file__).resolve().parents[3] / "shared" / "workloads")
)


@pytest.mark.parametrize("name", NAMES)
def test_synthetic_is_deterministic_by_seed(name):
    assert same_workload(synthetic(name, 0.2, seed=3), synthetic(name, 0.2, seed=3))
    assert not same_workload(synthetic(name, 0.2, seed=3), synthetic(name, 0.2, seed=4))


@pytest.mark.parametrize("name", NAMES)
def test_larger_scale_extends_smaller(name):
    small, large = synthetic(name, 0.3), synthetic(name, 0.6)
    assert len(large) > len(small)
    assert same_workload(large[: len(small)], small)


@pytest.mark.parametrize("name", NAMES)
def test_synthetic_turns_extend_exactly(name):
    for session in synthetic(name, 0.2):
        for (context, output), (following, _) in pairwise(session):
            full = np.concatenate((context, output))
            assert len(following) > len(full)
            assert np.array_equal(following[: len(full)], full)
        for context, output in session:
            assert context.dtype == output.dtype == np.uint32
            assert context.max() < 32000 and len(output) > 0


def test_synthetic_shapes():
    codeact = synthetic("codeact")
    prompt = codeact[0][0][0][:1000]
    assert all(np.array_equal(s[0][0][:1000], prompt) for s in codeact)
    for name in NAMES:
        stats = workload_stats(synthetic(name))
        assert 100 <= stats.requests <= 1000
        assert 0.3e6 <= stats.context_tokens <= 2e6


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="name"):
        synthetic("sharegpt")
    with pytest.raises(ValueError, match="scale"):
        synthetic("eabf", scale=-1.0)
    with pytest.raises(ValueError, match="seed"):
        synthetic("eabf", seed=-1)
    with pytest.raises(ValueError, match="subset"):
        load_trace("swebench")
    with pytest.raises(ValueError, match="expand"):
        read_mooncake(os.devnull, expand=0)


def test_round_robin_order():
    workload = [
        [(np.arange(n, dtype=np.uint32), np.zeros(1, np.uint32)) for n in range(turns)]
        for turns in (3, 1, 2)
    ]
    order = [(r.session, r.turn) for r in iter_requests(workload)]
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
    request = next(iter_requests(workload))
    assert request.unit == "tokens" and np.array_equal(request.full, [0])


def test_shipped_trace_loads():
    sizes = {"miniswe": (20, 402), "magagent": (25, 746), "taubench": (24, 471)}
    for subset, (sessions, requests) in sizes.items():
        workload = load_trace(subset)
        assert (len(workload), sum(map(len, workload))) == (sessions, requests)
    assert len(load_trace()) == sum(s for s, _ in sizes.values())
    stats = workload_stats(load_trace("miniswe"))
    assert stats.mean_blocks == pytest.approx(493, abs=1)
    assert stats.hit_ratio == pytest.approx(0.934, abs=0.005)


@pytest.mark.skipif(not (SHARED / "lmcache-agent-trace").is_dir(), reason="text trace absent")
def test_shipped_trace_matches_tokenization():
    sentencepiece = pytest.importorskip("sentencepiece")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(SHARED / "tokenizer.model.v1"))
    for subset in SUBSETS:
        text = list(read_text_trace(SHARED / "lmcache-agent-trace", subset).values())
        loaded = load_trace(subset)
        assert len(text) == len(loaded)
        for index in (0, len(text) // 2, len(text) - 1):
            assert len(text[index]) == len(loaded[index])
            for turn in (0, len(text[index]) - 1):
                context, output = loaded[index][turn]
                assert context.tolist() == processor.encode(text[index][turn].input)
                assert output.tolist() == processor.encode(text[index][turn].output)


def test_text_trace_skips_empty_files(tmp_path):
    (tmp_path / "taubench").mkdir()
    (tmp_path / "taubench" / "empty.jsonl").write_text("")
    rows = [{"timestamp": t, "input": f"i{t}", "output": "o", "session_id": "s"} for t in (2, 1)]
    (tmp_path / "taubench" / "a.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n\n")
    sessions = read_text_trace(tmp_path, "taubench")
    assert [t.input for t in sessions["s"]] == ["i1", "i2"]


def _prefix_keys(tokens: np.ndarray, block: int) -> list[bytes]:
    return [tokens[:end].tobytes() for end in range(block, len(tokens) + 1, block)]


def test_mooncake_round_trip(tmp_path):
    workload = synthetic("ultrachat", 0.1)
    path = tmp_path / "trace.jsonl"
    write_mooncake(workload, path, block_tokens=16)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    requests = list(iter_requests(workload))
    assert [r["input_length"] for r in records] == [len(q.context) for q in requests]
    assert [r["output_length"] for r in records] == [len(q.output) for q in requests]
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 16) for r in records)

    blocks = read_mooncake(path, block_tokens=16)
    assert len(blocks) == len(requests)
    by_prefix: dict[bytes, int] = {}
    by_id: dict[int, bytes] = {}
    for request, session in zip(requests, blocks, strict=True):
        ((context, output),) = session
        assert context.dtype == np.uint64 and len(output) == 0
        prefixes = _prefix_keys(request.context, 16)
        assert len(context) == len(prefixes)
        for prefix, block_id in zip(prefixes, context.tolist(), strict=True):
            assert by_prefix.setdefault(prefix, block_id) == block_id
            assert by_id.setdefault(block_id, prefix) == prefix
    assert {r.unit for r in iter_requests(blocks)} == {"blocks"}


def test_mooncake_expansion_preserves_prefixes(tmp_path):
    path = tmp_path / "trace.jsonl"
    rows = [[1, 2, 3], [1, 2, 4], [1, 5], [6, 2, 3]]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": i,
                    "input_length": 512 * len(ids),
                    "output_length": 7,
                    "hash_ids": ids,
                }
            )
            + "\n"
            for i, ids in enumerate(rows)
        )
    )
    plain = [s[0][0] for s in read_mooncake(path)]
    wide = [s[0][0] for s in read_mooncake(path, expand=4)]
    assert [len(w) for w in wide] == [4 * len(p) for p in plain]
    assert len({x for w in wide for x in w.tolist()}) == 4 * len(
        {tuple(r[: i + 1]) for r in rows for i in range(len(r))}
    )
    for a in range(len(rows)):
        for b in range(len(rows)):
            shared = next(
                (i for i, (x, y) in enumerate(zip(plain[a], plain[b], strict=False)) if x != y),
                None,
            )
            shared = min(len(plain[a]), len(plain[b])) if shared is None else shared
            wide_shared = np.flatnonzero(wide[a][: 4 * shared] != wide[b][: 4 * shared])
            assert len(wide_shared) == 0
            if shared < min(len(plain[a]), len(plain[b])):
                assert wide[a][4 * shared] != wide[b][4 * shared]
    assert not np.array_equal(plain[0][1:2], plain[3][1:2])  # same hash id, other prefix


def test_mooncake_drops_partial_block(tmp_path):
    path = tmp_path / "trace.jsonl"
    record = {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [9, 8]}
    path.write_text(json.dumps(record) + "\n")
    ((context, _),) = read_mooncake(path)[0]
    assert len(context) == 1


def test_catalog_names_the_whole_trace_and_refuses_unknown_names():
    from sarp.bench.catalog import check_workload, load_workload

    whole = load_workload("trace/all")
    assert len(whole) == sum(len(load_workload(f"trace/{s}")) for s in SUBSETS)
    with pytest.raises(ValueError, match="trace/everything"):
        check_workload("trace/everything")


def test_the_scale_applied_is_the_one_reported(tmp_path):
    """A Mooncake file is replayed whole and the agent trace has no more sessions than it
    holds, whatever --scale says: the report names the scale each workload got."""
    from sarp.bench.catalog import effective_scale, load_workload

    path = tmp_path / "t.jsonl"
    write_mooncake(synthetic("ultrachat", 0.02, 0), path, block_tokens=16)
    name = f"mooncake:{path}"
    assert len(load_workload(name, 0.25)) == len(load_workload(name, 1.0))
    assert effective_scale(name, 0.25) == 1.0
    assert len(load_workload("trace/magagent", 4.0)) == len(load_workload("trace/magagent", 1))
    assert effective_scale("trace/magagent", 4.0) == 1.0
    assert effective_scale("trace/magagent", 0.25) == 0.25
    assert effective_scale("synthetic/codeact", 4.0) == 4.0
