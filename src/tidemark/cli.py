"""The ``tidemark`` command line: broker management, running services, the demo, and the operator
commands against the coordinator's API (:mod:`tidemark.admin.coordinator_commands`)."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import typer

from tidemark import __version__
from tidemark.broker.embedded import EmbeddedBroker, EmbeddedBrokerError
from tidemark.broker.engine import DEFAULT_ENGINE, ENGINE_ENV
from tidemark.config.settings import DEFAULT_HOME
from tidemark.admin.coordinator_commands import install as install_operator_commands
from tidemark.admin.coordinator_commands import jobs_app
from tidemark.admin.generate_commands import install as install_generate_commands
from tidemark.admin.state_commands import install as install_state_commands
from tidemark.admin.topic_commands import install as install_topic_commands
from tidemark.runtime.job_commands import install as install_job_commands
from tidemark.verification.verify_command import install as install_verify_command

app = typer.Typer(help="Tidemark: stateful PySpark streaming on Kafka.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
broker_app = typer.Typer(help="The embedded Kafka broker (Apache Kafka in KRaft mode, or Tansu).",
                         no_args_is_help=True)
app.add_typer(broker_app, name="broker")
install_operator_commands(app)
install_job_commands(jobs_app)
install_topic_commands(app)
install_generate_commands(app)
install_state_commands(app)
install_verify_command(app)

HomeOption = typer.Option(DEFAULT_HOME, "--home", envvar="TIDEMARK_HOME",
                          help="Directory for local state (broker record, logs, checkpoints).")


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"tidemark {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """Tidemark: stateful PySpark streaming on Kafka."""


class Engine(str, enum.Enum):
    kafka = "kafka"
    tansu = "tansu"


class Service(str, enum.Enum):
    coordinator = "coordinator"
    checkpoint_store = "checkpoint-store"
    changelog = "changelog"
    materializer = "materializer"


def _broker(home: Path, port: int | None = None, engine: Engine | None = None) -> EmbeddedBroker:
    return EmbeddedBroker(home / "broker", port=port, engine_name=engine.value if engine else None)


@broker_app.command("start")
def broker_start(
    home: Path = HomeOption,
    port: int = typer.Option(0, min=0, max=65535,
                             help="TCP port; 0 reuses the last start's port (Apache Kafka) or picks a free one."),
    engine: Engine = typer.Option(DEFAULT_ENGINE, "--engine", envvar=ENGINE_ENV,
                                  help="Apache Kafka (KRaft, data kept under --home) or Tansu (memory only)."),
) -> None:
    """Start the embedded broker in the background and wait until it serves metadata."""
    try:
        status = _broker(home, port or None, engine).start()
    except EmbeddedBrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"broker running: engine={status.engine} pid={status.pid} bootstrap={status.bootstrap_servers} "
               f"started_in={status.startup_s:.1f}s fetch={status.fetch_s or 0:.1f}s log={status.log_path}")
    typer.echo(f"export KAFKA_BOOTSTRAP_SERVERS={status.bootstrap_servers}")


@broker_app.command("stop")
def broker_stop(home: Path = HomeOption) -> None:
    """Stop the embedded broker started from this home directory."""
    stopped = _broker(home).stop()
    typer.echo("broker stopped" if stopped else "broker was not running")


@broker_app.command("status")
def broker_status(home: Path = HomeOption, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show whether the embedded broker runs; exit 1 when it does not."""
    status = _broker(home).status()
    if as_json:
        typer.echo(json.dumps({"running": status.running, "pid": status.pid, "engine": status.engine,
                               "bootstrap_servers": status.bootstrap_servers}))
    else:
        typer.echo(f"running: engine={status.engine} pid={status.pid} bootstrap={status.bootstrap_servers}"
                   if status.running else "not running")
    raise typer.Exit(0 if status.running else 1)


@app.command("run")
def run(service: Service = typer.Argument(..., help="The service to run.")) -> None:
    """Run one service in the foreground until SIGTERM or Ctrl-C."""
    from tidemark.services import run_service

    run_service(service.value)


@app.command("demo")
def demo(home: Path = HomeOption) -> None:
    """Run the demo on the embedded defaults (broker, services, round trip), then clean up."""
    from tidemark.demo import run_demo

    raise typer.Exit(run_demo(home))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
