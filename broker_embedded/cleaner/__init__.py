"""Log compaction (Kafka's log cleaner).

- ``skimpy_offset_map``: the bounded offset map (24-byte slots of MD5 digest + offset in one
  preallocated buffer), MD5 and the map operations as numba functions;
- ``cleaner_kernel``: the compiled record walks (building the map, filtering and rewriting
  batches, the indexes of a cleaned segment);
- ``cleaner``: one round of cleaning of one log (``Cleaner``), with Kafka's retention rules;
  its segment reading a window at a time (``cleaner_window``), the transactions a pass sees
  (``cleaned_transaction_metadata``), the segment groups (``segment_groups``) and what a round
  did (``cleaner_stats``);
- ``log_cleaner_manager``: which log to clean and when, ``cleaner-offset-checkpoint``, the
  cleaner threads of a log dir (``LogCleaner``, started by the log manager).

The swap of cleaned segments and its crash recovery live in ``storage/cleaning_session.py``.
"""
