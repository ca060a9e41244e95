"""What every process of a job shares (supervisor, worker hosts, stage workers)."""
