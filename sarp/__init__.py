"""SARP: a persistent on-SSD index for LLM KVCache (sparse adaptive routing and packing).

    import sarp
    with sarp.open("idx", backend="wiredtiger") as index:
        index.insert(tokens=tokens, metadata=meta)
        m = index.match(tokens=tokens)
"""

from sarp import errors
from sarp.block_ids import as_block_ids, block_ids
from sarp.config import DEFAULT_METADATA_DTYPE, Config
from sarp.index import Index
from sarp.matching import MatchResult
from sarp.opening import open, rebuild

__all__ = ["DEFAULT_METADATA_DTYPE", "Config", "Index", "MatchResult", "as_block_ids",
           "block_ids", "errors", "open", "rebuild"]
__version__ = "0.1.0"
