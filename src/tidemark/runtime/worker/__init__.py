"""One stage worker process (``tidemark jobs worker``): a PySpark streaming query running a stage."""
