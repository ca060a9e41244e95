"""ServiceApp: a Faust app with Tidemark's topics, codec, dead letters, health and metrics.

Lifecycle: ``ServiceApp(name, settings)`` -> register event-sourced input with :meth:`follow_log`
and periodic work with :meth:`every` -> :meth:`run` (blocks; creates the topics, claims the
service's singleton lease (:mod:`tidemark.chassis.singleton`: a newer instance fences this one,
which then exits with code 75), starts the Faust worker and the HTTP port
(:mod:`tidemark.chassis.http_edge`: bind address, token, limits), and returns after SIGTERM/SIGINT
once in-flight work is finished, consumers closed and producers flushed, or exits non-zero when
that takes longer than ``shutdown_timeout_s``).

A service reads its topics only through :meth:`follow_log` (``assign()``, exact offsets): no
consumer group, so a restarted instance waits for no group join and no session of its killed
predecessor to expire. The Faust app runs its producer, timers, tasks and web server only.

The lease's grace period (the older instance stops acting) overlaps the start: the Faust worker
starts and the logs are replayed during it, but no live record is handled, no ``on_caught_up``
runs and no timer's work is done before it has passed.

Handlers receive decoded messages. A record that fails to decode, or whose handler raises, goes
to the dead-letter topic (see :mod:`tidemark.chassis.dead_letter_publisher`); the partition moves on.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.app.base import BootStrategy
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tidemark import __version__
from tidemark.exit_codes import EXIT_CONFIG, EXIT_SHUTDOWN_TIMEOUT, EXIT_UNREACHABLE
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import KafkaSecurity, base_config, kafka_security, resolve_bootstrap
from tidemark.kafka.outage import BrokerWatch
from tidemark.kafka.reachability import BrokerUnreachable, require_broker
from tidemark.kafka.topics import TopicNames, TopicSpec
from tidemark.processes import port_free
from tidemark.protocol import codec
from tidemark.chassis.dead_letter_publisher import RawRecord, record_failure
from tidemark.chassis.replay import EventLogReader
from tidemark.chassis.http_edge import install_edge, web_options
from tidemark.chassis.logs import get_logger
from tidemark.chassis.metrics import BUILD_INFO, MESSAGES_CONSUMED, SERVICE_READY
from tidemark.chassis.singleton import SingletonLease, lease_topic

log = get_logger(__name__)

LogHandler = Callable[[Any, RawRecord, bool], Awaitable[None]]


class _NoGroupBootStrategy(BootStrategy):
    """Faust's services without its consumer: no group, no leader assignor, no table manager
    (whose start alone sleeps a second)."""

    enable_kafka_consumer = False


class _ProducerApp(faust.App):
    BootStrategy = _NoGroupBootStrategy


class _BoundedShutdownWorker(faust.Worker):
    """A Faust worker whose shutdown after SIGTERM/SIGINT is bounded in time."""

    shutdown_timeout_s: float = 15.0

    def _arm_watchdog(self) -> None:
        def expire() -> None:
            log.error("shutdown took too long; exiting", timeout_s=self.shutdown_timeout_s)
            os._exit(EXIT_SHUTDOWN_TIMEOUT)

        timer = threading.Timer(self.shutdown_timeout_s, expire)
        timer.daemon = True
        timer.start()

    def _on_sigterm(self) -> None:
        self._arm_watchdog()
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._arm_watchdog()
        super()._on_sigint()


class ServiceApp:
    """One Tidemark service process."""

    def __init__(self, name: str, settings: TidemarkSettings, *, extra_topics: list[TopicSpec] = ()) -> None:
        self.name = name
        self.settings = settings
        self.topics = TopicNames(settings.topic_prefix)
        self.bootstrap = resolve_bootstrap(settings)
        self._topic_specs = [*self.topics.control_plane(), lease_topic(settings.topic_prefix), *extra_topics]
        self._logs: list[EventLogReader] = []
        self._rebuilt: set[int] = set()  # the followed logs whose on_caught_up returned (by index)
        self._acting_from: float | None = None  # monotonic; set by run() once the lease is claimed
        data_dir = settings.resolved_state_dir / name
        data_dir.mkdir(parents=True, exist_ok=True)
        self.faust = _ProducerApp(
            f"{settings.topic_prefix}-{name}",
            broker=f"kafka://{self.bootstrap}",
            broker_credentials=_faust_credentials(kafka_security(settings)),
            store="rocksdb://",
            datadir=str(data_dir),
            **web_options(settings),
            topic_replication_factor=settings.kafka.replication_factor,
            topic_partitions=1,
            producer_acks=-1,
        )
        self._dead_letters = self.faust.topic(self.topics.dead_letters, value_serializer="raw", key_serializer="raw")
        self.http_auth = install_edge(self.faust.web.web_app, name, settings.api_token)
        self._install_pages()
        BUILD_INFO.labels(service=name).info({"version": __version__})
        SERVICE_READY.labels(service=name).set_function(lambda: 1.0 if self.ready() else 0.0)

    # ------------------------------------------------------------------ registration

    def every(self, seconds: float) -> Callable[[Callable[[], Awaitable[None]]], Any]:
        """Decorator: run the coroutine function every ``seconds`` while the service runs, from
        the end of the lease's grace period on."""
        def register(work: Callable[[], Awaitable[None]]) -> Any:
            @functools.wraps(work)
            async def when_acting() -> None:
                if self.may_act():
                    await work()

            return self.faust.timer(seconds)(when_acting)

        return register

    def follow_log(self, topics: list[str], handler: LogHandler,
                   on_caught_up: Callable[[], Awaitable[None]], *,
                   confirm_delivery: bool = False) -> EventLogReader:
        """Event-sourced input: ``handler(message, raw, replayed)`` for every record of ``topics``
        from their first offset, then live; ``on_caught_up()`` once, after the last replayed record.
        Returns the reader (``confirm_delivery``: see :class:`EventLogReader`). Replayed records
        are handled as soon as read; live ones and ``on_caught_up`` once the instance may act.

        Undecodable records go to the dead-letter topic when first seen live; replayed ones were
        dead-lettered by an earlier instance and are only counted again.
        """
        reader = EventLogReader(base_config(self.settings, self.bootstrap), topics,
                                confirm_delivery=confirm_delivery)
        index = len(self._logs)
        self._logs.append(reader)

        async def follow() -> None:
            await self._follow(reader, handler, on_caught_up, index)

        self.faust.task(follow)
        return reader

    async def _follow(self, reader: EventLogReader, handler: LogHandler,
                      on_caught_up: Callable[[], Awaitable[None]], index: int) -> None:
        """Replay ``reader``'s logs, then follow them; a live record and ``on_caught_up`` wait
        for the end of the lease's grace period (:meth:`until_acting`)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, reader.open)
        announced = False
        try:
            while True:
                for record in await loop.run_in_executor(None, reader.poll):
                    if not record.replayed:
                        await self.until_acting()
                    await self._handle(record.raw, handler, replayed=record.replayed)
                if not announced and reader.caught_up:
                    announced = True
                    await self.until_acting()
                    await on_caught_up()
                    self._rebuilt.add(index)  # ready only from here: the state is rebuilt
        finally:
            reader.close()

    def may_act(self) -> bool:
        """True once this instance holds the lease and its grace period has passed."""
        return self._acting_from is not None and time.monotonic() >= self._acting_from

    async def until_acting(self) -> None:
        """Return once :meth:`may_act`."""
        while not self.may_act():
            left = None if self._acting_from is None else self._acting_from - time.monotonic()
            await asyncio.sleep(0.05 if left is None else max(left, 0.0))

    async def publish(self, topic: str, message: Any, key: bytes | None = None) -> None:
        """Encode ``message`` (Avro, Confluent wire format) and send it to ``topic``."""
        await self.faust.topic(topic, value_serializer="raw", key_serializer="raw").send(
            key=key, value=codec.encode(message)
        )

    # ------------------------------------------------------------------ health

    def ready(self) -> bool:
        """True when every followed log was replayed and the state rebuilt from it (its
        ``on_caught_up`` returned)."""
        return len(self._rebuilt) == len(self._logs)

    def _install_pages(self) -> None:
        @self.faust.page("/livez")
        async def livez(web: Any, request: Any) -> Any:
            return web.json({"status": "alive", "service": self.name})

        @self.faust.page("/readyz")
        async def readyz(web: Any, request: Any) -> Any:
            ready = self.ready()
            body = {"status": "ready" if ready else "not-ready", "service": self.name}
            return web.json(body, status=200 if ready else 503)

        @self.faust.page("/metrics")
        async def metrics(web: Any, request: Any) -> Any:
            return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    # ------------------------------------------------------------------ processing

    async def _handle(self, raw: RawRecord, handler: LogHandler, *, replayed: bool) -> None:
        """Decode ``raw`` and run ``handler``; any failure dead-letters the record (invariant 5)."""
        try:
            decoded = codec.decode(raw.value or b"")
            MESSAGES_CONSUMED.labels(service=self.name, topic=raw.topic).inc()
            await handler(decoded, raw, replayed)
        except Exception as exc:  # never crash, never block the partition
            letter = record_failure(raw, exc, self.name)
            if not replayed:
                await self._dead_letters.send(key=letter.key, value=codec.encode(letter))

    # ------------------------------------------------------------------ running

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(base_config(self.settings, self.bootstrap))
        created = ensure_topics(admin, self._topic_specs, self.settings.kafka.replication_factor)
        if created:
            log.info("topics created", topics=created)

    def run(self) -> None:
        """Create topics, then run until SIGTERM/SIGINT. Raises SystemExit with the exit code
        (69 with one line on stderr when Kafka cannot be reached at all: :mod:`tidemark.kafka.reachability`;
        78 with one line when its HTTP port is taken)."""
        port = self.settings.http_port
        if port and not port_free(port, self.settings.http_host):
            print(f"error: {self.name}: TIDEMARK_HTTP_PORT: {self.settings.http_host}:{port} cannot be bound: "
                  "address already in use", file=sys.stderr)
            raise SystemExit(EXIT_CONFIG)
        try:
            require_broker(base_config(self.settings, self.bootstrap))
        except BrokerUnreachable as exc:
            print(exc.one_line(self.name), file=sys.stderr)
            raise SystemExit(EXIT_UNREACHABLE) from None
        self.create_topics()
        worker = _BoundedShutdownWorker(
            self.faust, loglevel=self.settings.log_level, override_logging=False, quiet=True
        )
        worker.shutdown_timeout_s = self.settings.shutdown_timeout_s
        log.info("service starting", bootstrap=self.bootstrap, http_port=self.settings.http_port)
        BrokerWatch(base_config(self.settings, self.bootstrap)).start()  # reports outages; aiokafka reconnects
        lease = SingletonLease(self.name, base_config(self.settings, self.bootstrap), self.settings.topic_prefix)
        lease.claim()  # fences the running instance, if any, before this one acts
        self._acting_from = lease.acting_from
        lease.watch()
        worker.execute_from_commandline()


def _faust_credentials(security: KafkaSecurity) -> Any:
    """``security`` (:func:`tidemark.kafka.clients.kafka_security`) as Faust's (aiokafka's) broker credentials."""
    ssl_context = None
    if security.tls:
        import ssl

        ssl_context = ssl.create_default_context(cafile=security.ca_location)
    if security.sasl_mechanism:
        return faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password,
            mechanism=security.sasl_mechanism,
            ssl_context=ssl_context,
        )
    return ssl_context
