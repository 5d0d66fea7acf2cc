"""The trail over time: retention's removal of old records, the Parquet archive (read as
Arrow columns), and ``iabma audit-migrate``'s upgrade of older trails."""
