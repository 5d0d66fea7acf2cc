"""The durable audit trail: one record per answered prediction, committed in groups."""
