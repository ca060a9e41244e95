# syntax=docker/dockerfile:1
# The one Tidemark image: every service (`tidemark run <service>`) and the jobs
# (`tidemark jobs run package.module:attr`, one PySpark worker process per stage).
# The build stage installs the locked dependencies (requirements.lock, hash-checked: the versions
# CI tested), makes the Tidemark wheel (it carries the message schemas) and installs it with every
# extra into /opt/tidemark. services/*/Dockerfile are thin FROMs of this image.
#
#   docker build -t tidemark:<version> .     (<version>: pyproject.toml's; `tidemark --version`)

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE requirements.lock ./
COPY schemas ./schemas
COPY src ./src
# The wheel carries the message schemas: src/tidemark/schemas links to schemas/.
RUN python -m pip wheel --no-deps --wheel-dir /wheels .
# Byte-code is compiled at install time: the root filesystem is read-only at run time.
RUN python -m venv /opt/tidemark \
 && /opt/tidemark/bin/pip install --require-hashes -r requirements.lock \
 && /opt/tidemark/bin/pip install --no-deps "$(ls /wheels/tidemark-*.whl)" \
 && /opt/tidemark/bin/pip check \
 && /opt/tidemark/bin/python -c "from tidemark.protocol.codec import Codec; Codec.local()"
# Spark's Kafka connector, which the stage workers read Kafka with (tidemark.spark.kafka_connector):
# fetched with Maven here, so a worker never needs Maven or Maven Central at run time.
# /usr/share/man/man1: a slim base has none, and the JRE's post-install script fails without it.
RUN command -v mvn >/dev/null || (mkdir -p /usr/share/man/man1 && apt-get update \
    && apt-get install -y --no-install-recommends maven) \
 && TIDEMARK_CACHE_DIR=/opt/tidemark/cache /opt/tidemark/bin/python -c \
    "from tidemark.spark.kafka_connector import connector_jars; print(len(connector_jars()), 'connector jars')"

FROM ${PYTHON_IMAGE} AS runtime
# Java 17 for PySpark; tini reaps the JVM children and forwards signals; no other packages.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tidemark \
 && useradd --system --uid 10001 --gid tidemark --home-dir /var/lib/tidemark --shell /usr/sbin/nologin tidemark \
 && mkdir -p /var/lib/tidemark/state /var/lib/tidemark/checkpoints \
 && chown -R tidemark:tidemark /var/lib/tidemark
COPY --from=build /opt/tidemark /opt/tidemark
# Derived images add their job modules under /opt/tidemark/app (on PYTHONPATH).
ENV PATH=/opt/tidemark/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/opt/tidemark/app \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    HOME=/tmp \
    TIDEMARK_HOME=/var/lib/tidemark/state \
    TIDEMARK_CACHE_DIR=/opt/tidemark/cache \
    TIDEMARK_HTTP_HOST=0.0.0.0 \
    TIDEMARK_STATE_DIR=/var/lib/tidemark/state \
    TIDEMARK_CHECKPOINT_STORAGE_URL=file:///var/lib/tidemark/checkpoints
# The JVM class archive of Spark's classes (tidemark.spark.class_archive), trained on this JDK with
# the connector: every stage worker's driver maps it and starts about a third faster.
RUN python -m tidemark.spark.class_archive
WORKDIR /opt/tidemark/app
USER 10001:10001
VOLUME ["/var/lib/tidemark/state", "/var/lib/tidemark/checkpoints"]
EXPOSE 9400 9401 9402 9403 9404 9405 9406
ENTRYPOINT ["/usr/bin/tini", "--", "tidemark"]
CMD ["--help"]
