"""CRC-32C (Castagnoli): the checksum of Kafka's v2 record batches and producer snapshots, and of this project's own
files, chunks and remote checksums. One implementation for the whole project, the C extensions included
(``local/_crc32c.h`` calls this one).

It is fastcrc's, which is the ``crc-fast`` crate's (the AWS SDK for Rust checksums with it): carry-less
multiplication (PCLMULQDQ, VPCLMULQDQ with AVX-512 where the CPU has them; PMULL on aarch64) fused with the CPU's own
CRC-32C instructions, a table-driven path on other CPUs. On this project's 2-core machine it ran at 1.8x the
``crc32c`` package's speed on data in cache and 2-2.7x on data from memory (bench/RESULTS.md, 2026-11-28), where
the batches a Spark read decodes come from. It takes any bytes-like object and
releases the GIL over large ones, as that package did; the tests keep the ``crc32c`` package as their oracle.

``crc32c(data, value=0)``: the CRC-32C of ``data``, continuing from ``value`` (the CRC-32C of what came before).
"""

from __future__ import annotations

from fastcrc.crc32 import iscsi as crc32c

__all__ = ["crc32c"]
