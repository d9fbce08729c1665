"""Log compaction: Kafka's log cleaner for topics whose ``cleanup.policy`` holds ``compact``.

- :mod:`local.cleaner.offset_map`: the key digest -> latest offset map within a memory budget (``SkimpyOffsetMap``);
- :mod:`local.cleaner.records`: the per-record scan and re-encoding of a batch (a pure codec; C in ``_cleancore``);
- :mod:`local.cleaner.transactions`: what a cleaning knows of aborted and committed transactions;
- :mod:`local.cleaner.filter`: which batches and records a cleaning keeps, and the bytes it writes;
- :mod:`local.cleaner.cleaner`: one cleaning of one log (offset map, groups, ``.cleaned`` segments, swap);
- :mod:`local.cleaner.manager`: which log to clean next, ``cleaner-offset-checkpoint``, pausing and aborting;
- :mod:`local.cleaner.log_cleaner`: the cleaner threads and their metrics, as ``LogManager`` runs them.
"""
