"""A language server that shows fuse-all kernels and fusion decisions next to compiled functions."""

from .__about__ import __version__
from .records import Record, RecordError, default_artifact_dir, read_record
from .server import create_server
from .store import load_records

__all__ = [
    "Record",
    "RecordError",
    "__version__",
    "create_server",
    "default_artifact_dir",
    "load_records",
    "read_record",
]
