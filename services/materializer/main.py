"""Entry point of the materializer service container: `python services/materializer/main.py`."""

from tidemark.services import run_service

if __name__ == "__main__":
    run_service("materializer")
