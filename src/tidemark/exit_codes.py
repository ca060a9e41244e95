"""The exit statuses of every Tidemark command and service, one set (``docs/operations.md``,
"Exit codes"): a user-caused error prints one line on stderr and exits with one of these."""

from __future__ import annotations

EXIT_FAILED = 1  # the API refused or failed; verify: not exactly once; jobs run: out of restarts
EXIT_USAGE = 2  # bad command-line usage: options, --job-args, a job reference, an unknown topic
EXIT_REFUSED = 3  # a restart will not fix it: missing input topic, committed output (--force), unusable restore source, a missing extra
EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE: Kafka cannot be reached at start
EXIT_SHUTDOWN_TIMEOUT = 70  # a service did not shut down within TIDEMARK_SHUTDOWN_TIMEOUT_S
EXIT_FENCED = 75  # EX_TEMPFAIL: a newer instance of the service is active
EXIT_CONFIG = 78  # EX_CONFIG: invalid settings, naming the variable
