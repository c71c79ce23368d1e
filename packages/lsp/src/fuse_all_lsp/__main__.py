"""`fuse-all-lsp` / `python -m fuse_all_lsp`: serve LSP over stdio."""

from __future__ import annotations

import argparse
import logging
import sys

from .__about__ import __version__
from .server import create_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fuse-all-lsp", description="fuse-all language server (LSP over stdio)")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (the default; editors pass it)")
    parser.add_argument("--artifact-dir", help="default artifact directory (the artifactDir setting still wins)")
    parser.add_argument("--python", help="default interpreter for fuse-all.compileFile (the python setting still wins)")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"fuse-all-lsp {__version__}")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=arguments.log_level, stream=sys.stderr, format="fuse-all-lsp %(levelname)s %(message)s")
    create_server(artifact_dir=arguments.artifact_dir, python=arguments.python).start_io()


if __name__ == "__main__":
    main()
