"""Fixtures for the S3 storage tests: a real moto S3 server, credentials and fresh buckets."""

from moto_s3_server import moto_s3_endpoint, s3_bucket, s3_env

__all__ = ["moto_s3_endpoint", "s3_bucket", "s3_env"]
