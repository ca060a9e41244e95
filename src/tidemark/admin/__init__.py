"""The operator-facing interface of checkpointing: the HTTP API's JSON documents
(:mod:`.documents`), what a job has in checkpoint storage (:mod:`.catalog`), the HTTP client
(:mod:`.client`) and the ``tidemark`` CLI commands built on it (:mod:`.commands`).

The HTTP views themselves live with the coordinator service
(:mod:`tidemark.services.coordinator.rest_api`); see docs/api.md.
"""

DEFAULT_URL = "http://127.0.0.1:9400"  # the coordinator's operator API, unless --url or TIDEMARK_COORDINATOR_URL
