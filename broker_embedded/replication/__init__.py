"""Replica state, the in-sync replica set, the high watermark, leader epochs and the controller
(leader election, rack-aware replica assignment). Not built yet."""
