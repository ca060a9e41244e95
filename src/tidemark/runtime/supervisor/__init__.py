"""The job supervisor (``tidemark jobs run``): attempts, the state each restores, failover."""
