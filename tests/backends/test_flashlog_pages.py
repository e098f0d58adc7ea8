"""flashlog page format 2: records larger than a block payload packed into multi-record pages.

A record that fits in a block never crosses a block boundary; a larger one starts where the
page's stream is and continues over the next blocks (continuation blocks say "no record starts
here"). These tests cover values straddling the payload, mixed sizes in one page, reopening,
torn tails, a flipped byte inside a continuation block, and the DRAM and read costs.
"""

from __future__ import annotations

import functools
import random
import struct
from pathlib import Path

import pytest

from sarp.errors import CorruptionError
from storage_backends.flashlog_log import _FIRST, _PAGE, EXACT, NO_START, PAGE_VERSION, REC
from storage_backends.io import FileIO
from storage_backends.power_loss import PowerLossIO

from .conftest import open_flashlog

B = 4096
AREA = B - 8 - 2  # record bytes of a data block
# values around the block payload: fits exactly, one byte over, spans 2 and 3 blocks, large
STRADDLING = [0, 40, 1576, AREA - REC.size - 1, AREA - REC.size, AREA - REC.size + 1, 4088,
              4096, 2 * AREA - REC.size, 2 * AREA - REC.size + 1, 3 * AREA + 100, 64 << 10]
#: a flash-log store with a 1 MiB budget (``open_flashlog``'s other defaults)
_open = functools.partial(open_flashlog, memory_budget=1 << 20)


def _pages(path: Path) -> list[tuple[int, int, int, int, list[int]]]:
    """(start block, flags, records, blocks, first-start offsets of data blocks) per page."""
    (log,) = path.glob("log.*")
    data = log.read_bytes()
    out, blk = [], 0
    while blk * B < len(data):
        magic, version, flags, _, nrecs, nblocks, _, _ = _PAGE.unpack_from(data, blk * B)
        assert version == PAGE_VERSION
        firsts = [_FIRST.unpack_from(data, (blk + i) * B)[0] for i in range(1, nblocks)]
        out.append((blk, flags, nrecs, nblocks, firsts))
        blk += nblocks
    return out


def test_straddling_sizes_mixed_in_one_page_survive_reopen(tmp_path: Path) -> None:
    rng = random.Random(1)
    values = {rng.getrandbits(64): rng.randbytes(size) for size in STRADDLING for _ in range(6)}
    path = tmp_path / "s"
    with _open(path, memory_budget=64 << 20, instances=1) as s:
        s.put_many(values.items())
        s.delete(next(iter(values)))  # a tombstone among them
        gone = next(iter(values))
        del values[gone]
        s._flush_instance(0)  # the buffer as one page, now
        assert s.get_many(list(values)) == list(values.values())
        assert s.get(gone) is None
    pages = _pages(path)
    assert len(pages) == 1  # one instance, one page: small and large records mixed
    _, flags, nrecs, nblocks, firsts = pages[0]
    assert nrecs == len(values) + 1  # and the tombstone
    assert NO_START in firsts  # the 64 KiB values make continuation blocks
    assert not flags & EXACT  # small records do not all land on a fence
    # fewer blocks than records padded to whole blocks would take
    assert nblocks - 1 < sum(-(-(REC.size + len(v)) // AREA) for v in values.values())
    with _open(path, memory_budget=64 << 20, instances=1) as s:
        assert s.get_many(list(values)) == list(values.values())
        assert dict(s.scan()) == dict(sorted(values.items()))
        assert s.get(gone) is None


@pytest.mark.parametrize("size", [AREA - REC.size + 1, 4096, 3 * AREA])
def test_large_values_share_pages_and_read_few_blocks(size: int, tmp_path: Path) -> None:
    rng = random.Random(size)
    io = FileIO()
    path = tmp_path / "s"
    values = {rng.getrandbits(64): rng.randbytes(size) for _ in range(600)}
    with _open(path, io=io, memory_budget=8 << 20) as s:
        items = list(values.items())
        for i in range(0, len(items), 100):
            s.put_many(items[i:i + 100])
        for inst in range(4):
            s._flush_instance(inst)
    with _open(path, io=io, memory_budget=8 << 20) as s:
        st = s.stats()
        assert st["buffered_records"] == 0
        assert st["pages"] < len(values) / 10  # many records per page, no page per record
        span = -(-(REC.size + size) // AREA)  # blocks a record covers, at most one more
        # a 16-bit fence per block, 8 filter bits per key, the page places
        assert st["dram_bytes_per_key"] < (4 if size <= 4096 else 2 * span + 2)
        keys = rng.sample(sorted(values), 200)
        before = io.stats()
        assert s.get_many(keys) == [values[k] for k in keys]
        after = io.stats()
        reads = after["reads"] - before["reads"]
        assert reads <= 1.05 * len(keys)
        assert after["bytes_read"] - before["bytes_read"] <= len(keys) * (span + 1.3) * B
    pages = _pages(path)
    assert all(flags & EXACT for _, flags, *_ in pages)  # every record spans a block boundary
    # the log holds the records with little padding: about one block more per page
    total = sum(nb for _, _, _, nb, _ in pages)
    assert total <= len(values) * (REC.size + size) / AREA + 2 * len(pages)


@pytest.mark.parametrize("mode", ["drop", "tear"])
@pytest.mark.parametrize("seed", range(3))
def test_torn_tail_of_large_record_pages(mode: str, seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    io = PowerLossIO(seed)
    path = tmp_path / "s"
    s = _open(path, io=io, durability="sync")
    last: dict[int, bytes] = {}
    for _ in range(40):
        batch = {rng.randrange(150): rng.randbytes(rng.choice(STRADDLING)) for _ in range(6)}
        s.put_many(batch.items())
        last.update(batch)
    assert any(p.name.startswith("log.") for p, *_ in io._pending)  # an unsynced page to tear
    io.crash(mode)
    with _open(path) as s2:
        assert s2.get_many(list(last)) == list(last.values())
        assert dict(s2.scan()) == dict(sorted(last.items()))


def test_flipped_byte_in_a_continuation_block_is_detected(tmp_path: Path) -> None:
    rng = random.Random(4)
    values = {k: rng.randbytes(64 << 10) for k in range(20)}
    path = tmp_path / "s"
    with _open(path) as s:
        s.put_many(values.items())
    with _open(path):
        pass  # reopening moves everything into synced pages
    (log,) = path.glob("log.*")
    data = bytearray(log.read_bytes())
    off = data.find(values[7][30000:30064])
    assert off > 0
    blk = off // B
    assert struct.unpack_from("<H", data, blk * B)[0] == NO_START  # a continuation block
    data[off + 5] ^= 0x40
    log.write_bytes(bytes(data))
    with _open(path) as s:
        with pytest.raises(CorruptionError):
            s.get(7)
        others = [k for k in values if k != 7]
        found = {}
        for k in others:
            try:
                found[k] = s.get(k)
            except CorruptionError:
                continue  # shares the damaged block's read range
        assert found and all(v == values[k] for k, v in found.items())


def test_oversized_value_is_refused_before_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as s:
        limit = s._log.max_record - REC.size
        with pytest.raises(ValueError):
            s.put_many([(1, b"x"), (2, bytes(limit + 1))])
        s.put(3, b"y")
    with _open(path) as s:
        assert s.get(1) is None and s.get(3) == b"y"


def test_old_page_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as s:
        s.put_many((k, bytes(3000)) for k in range(200))
    (log,) = path.glob("log.*")
    data = bytearray(log.read_bytes())
    data[4] = 1
    _reseal(log, data, 0)
    with pytest.raises(CorruptionError, match="version 1"):
        _open(path)


def test_new_keys_are_not_counted_as_garbage(tmp_path: Path) -> None:
    """Exact pages' filters pass ~4% of absent keys; their fences must rule those out, or the
    garbage estimate (and so compaction) would grow with every new key."""
    rng = random.Random(8)
    with _open(tmp_path / "s") as s:
        for _ in range(40):
            s.put_many((rng.getrandbits(64), rng.randbytes(4096)) for _ in range(100))
        st = s.stats()
        assert st["pages"] > 4 * 20  # chains of 20+ pages
        assert st["garbage_bytes_estimate"] < 0.02 * st["log_record_bytes"]
        assert st["compactions"] == 0


@pytest.mark.parametrize("cut", ["empty", "last page"])
def test_a_log_cut_inside_its_synced_part_is_corruption(cut: str, tmp_path: Path) -> None:
    """A log shorter than the synced blocks the WAL header records (truncated at a page
    boundary, so that no page fails its checks) has lost synced pages: CorruptionError at
    open, not a store missing their records."""
    rng = random.Random(9)
    path = tmp_path / "s"
    with _open(path) as s:
        s.put_many((k, rng.randbytes(1576)) for k in range(400))
    pages = _pages(path)
    assert len(pages) >= 2
    (log,) = path.glob("log.*")
    with open(log, "r+b") as f:
        f.truncate(0 if cut == "empty" else pages[-1][0] * B)
    with pytest.raises(CorruptionError, match=f"{log.name}: ends at block"):
        _open(path)


def _one_page_store(path: Path) -> tuple[Path, dict[int, bytes]]:
    """A closed one-instance store whose log holds one page: a header block and one data
    block of ten 100-byte records. Returns the log file and the records."""
    values = {k: bytes([k]) * 100 for k in range(1, 11)}
    with _open(path, instances=1) as s:
        s.put_many(values.items())
        s._flush_instance(0)  # the buffer as one page, now
    (log,) = path.glob("log.*")
    pages = _pages(path)
    assert [(nblocks, firsts[0]) for _, _, _, nblocks, firsts in pages] == [(2, 0)]
    return log, values


def _reseal(log: Path, data: bytearray, blk: int) -> None:
    """Write ``data`` back with block ``blk``'s checksum made to match its changed bytes: the
    damage a checksum cannot see (a bug, not the device), left to the format's own checks."""
    from storage_backends.blockframe import seal
    seal(data, blk * B, B, int(log.suffix[1:]) << 40 | blk)
    log.write_bytes(bytes(data))


def _first_record(values: dict[int, bytes], data: bytearray) -> tuple[int, int]:
    """(key, offset in the log) of the first record of block 1, the page's data block."""
    pos = B + _FIRST.size
    _, key, _ = REC.unpack_from(data, pos)
    assert key in values
    return key, pos


@pytest.mark.parametrize("fault", ["first-record offset", "record type", "record length"])
def test_a_checksummed_page_that_breaks_its_format_is_corruption(fault: str,
                                                                 tmp_path: Path) -> None:
    """Blocks that pass their checksums but whose content breaks the page format raise
    CorruptionError at every get that reads them: never a value cut from the wrong bytes, nor
    a key read as absent because a damaged record hid it."""
    path = tmp_path / "s"
    log, values = _one_page_store(path)
    data = bytearray(log.read_bytes())
    key, pos = _first_record(values, data)
    if fault == "first-record offset":
        _FIRST.pack_into(data, B, AREA)  # past the block's record area
        expect = "bad first-record offset"
    elif fault == "record type":
        data[pos] = 9  # neither a put nor a tombstone
        expect = "bad record in a page"
    else:
        struct.pack_into("<I", data, pos + 9, 1 << 20)  # its value runs past the page
        expect = "runs past the blocks"
    _reseal(log, data, 1)
    with _open(path, instances=1) as s:
        for k in (key, *values):  # the damaged record's key, then every key of the page
            with pytest.raises(CorruptionError, match=expect):
                s.get(k)
        assert s._buffers == [{}]  # the gets read the page, not a buffer


def test_a_log_cut_while_open_is_corruption_at_the_read(tmp_path: Path) -> None:
    """A data block gone from under an open store (the file cut short by something else)
    raises CorruptionError naming the blocks, not a short or empty value."""
    path = tmp_path / "s"
    log, values = _one_page_store(path)
    with _open(path, instances=1) as s:
        with open(log, "r+b") as f:
            f.truncate(B)  # the header block alone
        with pytest.raises(CorruptionError, match="cut short"):
            s.get(next(iter(values)))
