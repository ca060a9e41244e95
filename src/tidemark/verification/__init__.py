"""Exactly-once verification of a job's committed output: the comparison with an expectation
(:mod:`.comparison`), expectation files (:mod:`.expectation_file`), reading a topic read_committed
(:mod:`.committed_reader`) and the ``tidemark verify`` command (:mod:`.commands`)."""
