"""The S3 case of the writer's tests runs against a real moto S3 server, whose fixtures live with
the S3 integration tests in ``tests/integration/storage``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "storage"))

from moto_s3_server import moto_s3_endpoint, s3_bucket, s3_env  # noqa: E402

__all__ = ["moto_s3_endpoint", "s3_bucket", "s3_env"]
