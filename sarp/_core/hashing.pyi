from typing_extensions import Buffer

def xxh64(data: Buffer, seed: int = 0) -> int:
    """XXH64 of the bytes of ``data`` with ``seed``; equal to ``xxhash.xxh64_intdigest``."""
