"""The scrub behind ``tiered verify``: checks every byte of a data dir that can be checked, changing nothing.

Read-only by construction: files are opened ``O_RDONLY`` and read with ``os.pread``; no index is mapped, no lock
file, checkpoint, clean-shutdown marker or directory is created, nothing is recovered or renamed. Running it on a
live data dir is safe for the files but may report the active segment's torn tail or a half-written index.

What is checked, per partition dir (``<topic>-<partition>``):

* every batch of every ``.log``: its header (magic, length, last offset delta, record count, codec) and its CRC
  (CRC-32C over attributes..end for v2, zlib CRC-32 over magic..end for legacy v0/v1): one ``unpack_from`` and one
  checksum over a memoryview per batch; offsets increase across batches and segments; no trailing partial batch;
* the offset index (8- or 12-byte entries, auto-detected with ``local.index.detect_entry_size``): offsets
  increase and positions never go down (the loader's sanity rules), and each entry points at a batch start whose
  batch holds the entry's offset;
* the time index: timestamps increase and offsets never go down (the loader's rules), and each entry's offset
  lies in a batch whose max timestamp is the entry's timestamp (what Kafka's ``LogSegment`` appends, and
  recovery rebuilds);
* the transaction index: whole 34-byte entries of a known version, first <= last offset, the abort marker's
  offset inside the segment;
* producer snapshots (version, CRC-32C, length), ``leader-epoch-checkpoint`` (parses; epochs and start offsets
  increase) and ``partition.metadata`` (parses, non-zero topic id);

and per data dir: the recovery-point, log-start-offset, replication-offset and cleaner-offset checkpoints
(parse; a recovery point or log start offset past the partition's log end offset is reported) and the
clean-shutdown marker (parses). Without a clean-shutdown marker the next start recovers the active segment, so
its torn tail and zero-filled (preallocated) index entries are notes there, not problems.

A problem is a :class:`tiered.scrub.report.Problem` (a stable ``kind``, the file or remote object, the byte position and the offset
when known, and what is wrong); notes never change the verdict. The remote tier's checks are in
:mod:`tiered.scrub.remote_store` and reuse the byte-level checks (:mod:`tiered.scrub.batches`, :mod:`tiered.scrub.files`).

Modules: ``report`` (problems and reports), ``batches`` (the batch walk), ``files`` (indexes, snapshots,
checkpoints as bytes), ``data_dir`` (data dirs), ``remote_store`` (the remote tier).
"""
