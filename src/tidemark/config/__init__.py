"""Configuration: environment variables and an optional YAML file, validated at start."""

from tidemark.config.settings import (
    ConfigurationError,
    KafkaSettings,
    TidemarkSettings,
    load_settings,
)

__all__ = ["ConfigurationError", "KafkaSettings", "TidemarkSettings", "load_settings"]
