"""Auditors that share a fleet's serving hosts: each cycle's hosts are jobs in a job queue
(procrastinate) in the PostgreSQL history, taken by whichever auditor is free."""
