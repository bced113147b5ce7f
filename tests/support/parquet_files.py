"""What the Parquet files of a Delta table's current version are made of (tests only)."""

from __future__ import annotations

import pyarrow.parquet as pq
from deltalake import DeltaTable


def table_codecs(location: str) -> dict[str, set[str]]:
    """Per codec (Parquet's name: ZSTD, SNAPPY, GZIP, UNCOMPRESSED), the names of the table's
    current files that use it in some column chunk (a file without row groups uses none)."""
    found: dict[str, set[str]] = {}
    for uri in DeltaTable(location).file_uris():
        meta = pq.read_metadata(uri.removeprefix("file://"))
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                found.setdefault(meta.row_group(g).column(c).compression, set()).add(uri.rsplit("/", 1)[-1])
    return found
