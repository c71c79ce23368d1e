"""A language server that shows fuse-all kernels and fusion decisions next to compiled functions."""

from .__about__ import __version__
from .records import Record, RecordError, default_artifact_dir, read_record
from .store import load_records


def __getattr__(name: str):
    # The server needs pygls and lsprotocol; the record reader (what the compiler's own tests check records
    # against) needs neither, so importing the package must not pull the server in.
    if name == "create_server":
        from .server import create_server

        return create_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Record",
    "RecordError",
    "__version__",
    "create_server",
    "default_artifact_dir",
    "load_records",
    "read_record",
]
