"""Every exception SARP and its storage backends raise, in one place.

Bad arguments raise the built-in ``ValueError`` or ``TypeError`` with the argument's name in
the message; the classes below are for conditions of the index and its files.
"""


class SarpError(Exception):
    """Base class of SARP's own errors."""


# Stored data that fails its checks. Never served: the reader raises one of these instead.
class CorruptionError(SarpError):
    """Stored bytes fail a format or checksum check."""


class BadMagicError(CorruptionError):
    """A record does not start with the magic number of its format."""


class UnsupportedVersionError(CorruptionError):
    """A record was written by a format version this build does not read."""


class BadLengthError(CorruptionError):
    """A record is shorter or longer than its header says."""


class ChecksumError(CorruptionError):
    """A record's checksum does not match its contents."""


# Storage backends.
class StoreError(SarpError):
    """A storage backend cannot do what was asked."""


class StoreClosedError(StoreError):
    """The store was used after close()."""


class StoreLockedError(StoreError):
    """The store is already open: one handle at a time, across threads and processes."""


class StoreKindError(StoreError):
    """The path holds a store of another kind, or is not a store directory."""


class SyncFailedError(OSError, SarpError):
    """A device sync (fsync, fdatasync) of a file failed. The writes to that file since its
    last good sync may be lost: Linux may drop the pages it could not write, and a later sync
    that succeeds does not write them again."""


class WritesStoppedError(SarpError):
    """An earlier sync of this store, or of the index's journal, failed (``SyncFailedError``),
    so no later write is acknowledged on top of what it may have lost (docs/durability.md,
    "Failed writes")."""


# The index.
class ConfigMismatchError(SarpError):
    """An existing index was reopened with a configuration that conflicts with its own."""


class IndexClosedError(SarpError):
    """The index was used after close()."""


class RecoveryError(SarpError):
    """Recovery could not build a routing state it can verify; the message names file and fault."""


# The benchmark.
class RedisError(SarpError):
    """The Redis recovery anchor's server answered with an error, or did not answer in time."""
