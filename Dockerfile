# syntax=docker/dockerfile:1
# The one Tidemark image: every service (`tidemark run <service>`) and the jobs
# (`tidemark jobs run package.module:attr`, one PySpark worker process per stage).
# services/*/Dockerfile are thin FROMs of this image.
#
#   docker build -t tidemark:0.1.0 .

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/tidemark
COPY pyproject.toml README.md* ./
COPY src ./src
# Byte-code is compiled at install time: the root filesystem is read-only at run time.
RUN /opt/tidemark/bin/pip install ".[s3]" \
 && /opt/tidemark/bin/python -c "import tidemark"

FROM ${PYTHON_IMAGE} AS runtime
# Java 17 for PySpark; tini reaps the JVM children and forwards signals; no other packages.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tidemark \
 && useradd --system --uid 10001 --gid tidemark --home-dir /var/lib/tidemark --shell /usr/sbin/nologin tidemark \
 && mkdir -p /var/lib/tidemark/state /var/lib/tidemark/checkpoints \
 && chown -R tidemark:tidemark /var/lib/tidemark
COPY --from=build /opt/tidemark /opt/tidemark
COPY --chown=tidemark:tidemark schemas /opt/tidemark/schemas
COPY --chown=tidemark:tidemark examples /opt/tidemark/app/examples
ENV PATH=/opt/tidemark/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/opt/tidemark/app \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    HOME=/tmp \
    TIDEMARK_HOME=/var/lib/tidemark/state \
    TIDEMARK_HTTP_HOST=0.0.0.0 \
    TIDEMARK_STATE_DIR=/var/lib/tidemark/state \
    TIDEMARK_CHECKPOINT_STORAGE_URL=file:///var/lib/tidemark/checkpoints
WORKDIR /opt/tidemark/app
USER 10001:10001
VOLUME ["/var/lib/tidemark/state", "/var/lib/tidemark/checkpoints"]
EXPOSE 9400 9401 9402 9403 9404 9405 9406
ENTRYPOINT ["/usr/bin/tini", "--", "tidemark"]
CMD ["--help"]
