"""Log compaction: the bounded offset map, the cleaner for one log and the cleaner manager.
Not built yet."""
