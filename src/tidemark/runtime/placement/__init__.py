"""Where a job's worker processes run: on the supervisor's machine or on worker hosts."""
