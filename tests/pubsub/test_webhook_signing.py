"""Standard Webhooks signatures, verified by the reference `standardwebhooks` package on
a real local HTTP server, with the webhook worker as a real process."""

from __future__ import annotations

import json

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.pubsub.signing import generate_secret
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"


def admin_of(queue, **env):
    return QueueAdmin.from_settings(queue.settings(**env))


def verified(secret, request):
    """The payload as the reference library verifies it (raises when the signature fails)."""
    return Webhook(secret).verify(request.body, request.headers)


def test_signed_delivery_verifies_and_retries_share_the_webhook_id(pg_queue, http_endpoint):
    http_endpoint.script("/hook", statuses=[500, 200])
    with admin_of(pg_queue) as admin:
        secret = admin.subscriber_add("assinado", "proc", http_endpoint.url + "/hook",
                                      generate_secret=True)
        admin.subscriber_add("sem_segredo", "proc", http_endpoint.url + "/livre")
    assert secret.startswith("whsec_")
    pub_id = pg_queue.publish({"pedido": 7})
    worker = pg_queue.start_worker(WEBHOOK)
    eventually(lambda: (len(http_endpoint.received("/hook")) == 2
                        and http_endpoint.received("/livre")))
    pg_queue.wait_idle()

    first, second = http_endpoint.received("/hook")
    assert verified(secret, first) == {"pedido": 7}
    assert verified(secret, second) == {"pedido": 7}
    assert first.body == json.dumps({"pedido": 7}).encode()  # the body itself: no envelope
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    chain = [r for r in pg_queue.rows("publication_id = %s", (pub_id,))
             if r["subscriber_id"] == "assinado"]
    root = min(r["id"] for r in chain)
    assert first.headers["webhook-id"].endswith(f"_{root}")
    assert [r["status"] for r in sorted(chain, key=lambda r: r["id"])] == ["falha", "sucesso"]
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(first.body, first.headers)

    [free] = http_endpoint.received("/livre")
    assert not any(h.startswith("webhook-") for h in free.headers)
    log = worker.log()
    assert "sem_segredo" in log and "SEM assinatura" in log
    assert secret not in log and secret[6:] not in log


def test_rotation_signs_with_both_secrets_until_the_overlap_ends(pg_queue, http_endpoint):
    with admin_of(pg_queue) as admin:
        old = admin.subscriber_add("rot", "proc", http_endpoint.url + "/rot", generate_secret=True)
        new = admin.subscriber_rotate_secret("rot", overlap_seconds=3600)
    pg_queue.start_worker(WEBHOOK)
    pg_queue.publish({"n": 1})
    eventually(lambda: http_endpoint.received("/rot"))
    [req] = http_endpoint.received("/rot")
    assert len(req.headers["webhook-signature"].split(" ")) == 2
    assert verified(new, req) == {"n": 1}
    assert verified(old, req) == {"n": 1}  # a receiver still holding the old secret

    with admin_of(pg_queue) as admin:  # a rotation without overlap: only the newest signs
        newest = admin.subscriber_rotate_secret("rot", overlap_seconds=0)
    pg_queue.publish({"n": 2})
    eventually(lambda: len(http_endpoint.received("/rot")) == 2)
    req = http_endpoint.received("/rot")[1]
    assert len(req.headers["webhook-signature"].split(" ")) == 1
    assert verified(newest, req) == {"n": 2}
    with pytest.raises(WebhookVerificationError):
        verified(new, req)


FERNET_KEYS = ("dZuhwyIyTRadCJEvf3_k5UsuwzRWuWaft_u2OgWreEU=",
               "6o9Y_mB1ZMqm4ndKP0INVDvYaTZlvhsPgRCjrEh5glY=")


def test_secrets_encrypted_at_rest_and_reencrypted_after_a_key_rotation(pg_queue, http_endpoint):
    secret = generate_secret()
    with admin_of(pg_queue, WEBHOOK_SECRETS_KEY=FERNET_KEYS[0]) as admin:
        admin.subscriber_add("cifrado", "proc", http_endpoint.url + "/c", secret=secret)
    [row] = pg_queue.sql(f"SELECT segredo FROM {pg_queue.qsub_table} WHERE id = 'cifrado'")
    assert row["segredo"].startswith("enc:fernet:") and secret not in row["segredo"]
    assert secret[6:] not in row["segredo"]

    # New key first, old one still listed: reencrypt moves every secret to the new key.
    both = ",".join(reversed(FERNET_KEYS))
    with admin_of(pg_queue, WEBHOOK_SECRETS_KEY=both) as admin:
        assert admin.subscriber_reencrypt() == 1
        listed = admin.subscriber_list()
    assert secret not in json.dumps(listed, default=str)
    [row2] = pg_queue.sql(f"SELECT segredo FROM {pg_queue.qsub_table} WHERE id = 'cifrado'")
    assert row2["segredo"] != row["segredo"]

    worker = pg_queue.start_worker(WEBHOOK, WEBHOOK_SECRETS_KEY=FERNET_KEYS[1])  # new key only
    pg_queue.publish({"x": "y"})
    eventually(lambda: http_endpoint.received("/c"))
    assert verified(secret, http_endpoint.received("/c")[0]) == {"x": "y"}
    assert secret not in worker.log() and FERNET_KEYS[1] not in worker.log()


def test_header_values_encrypted_at_rest_and_older_rows_in_clear_still_delivered(
        each_db_queue, http_endpoint):
    queue = each_db_queue
    with admin_of(queue, WEBHOOK_SECRETS_KEY=FERNET_KEYS[0]) as admin:
        admin.subscriber_add("h", "proc", http_endpoint.url + "/h",
                             headers={"Authorization": "Bearer tok-123", "X-Cliente": "acme"})
    queue.add_subscriber("antigo", url=http_endpoint.url + "/a", method="POST",
                         headers={"X-Antigo": "claro"})  # a row from before: in clear

    def stored(sub_id):
        [row] = queue.sql(f"SELECT headers FROM {queue.qsub_table} WHERE id = %s", (sub_id,))
        raw = row["headers"]
        raw = raw.decode() if isinstance(raw, bytes) else raw
        return raw if isinstance(raw, str) else json.dumps(raw)

    first = stored("h")
    assert "tok-123" not in first and "acme" not in first
    assert all(v.startswith("enc:fernet:") for v in json.loads(first).values())
    assert set(json.loads(first)) == {"Authorization", "X-Cliente"}  # names in clear

    # New key first: reencrypt seals the old row's values too, and the new row's again.
    both = ",".join(reversed(FERNET_KEYS))
    with admin_of(queue, WEBHOOK_SECRETS_KEY=both) as admin:
        assert admin.subscriber_reencrypt() == 2
        listed = {r["id"]: r for r in admin.subscriber_list()}
    assert listed["h"]["headers"] == {"Authorization": "***", "X-Cliente": "***"}
    assert listed["antigo"]["headers"] == {"X-Antigo": "***"}
    assert stored("h") != first and "claro" not in stored("antigo")

    worker = queue.start_worker(WEBHOOK, WEBHOOK_SECRETS_KEY=FERNET_KEYS[1])  # new key only
    queue.publish({"x": "y"})
    eventually(lambda: http_endpoint.received("/h") and http_endpoint.received("/a"))
    [h] = http_endpoint.received("/h")
    [a] = http_endpoint.received("/a")
    assert h.headers["authorization"] == "Bearer tok-123" and h.headers["x-cliente"] == "acme"
    assert a.headers["x-antigo"] == "claro"
    assert "tok-123" not in worker.log()


def test_a_header_in_clear_is_sent_as_it_is_with_the_key_set(pg_queue, http_endpoint):
    pg_queue.add_subscriber("claro", url=http_endpoint.url + "/c", method="POST",
                            headers={"X-Claro": "valor"})
    pg_queue.start_worker(WEBHOOK, WEBHOOK_SECRETS_KEY=FERNET_KEYS[0])
    pg_queue.publish({"x": 1})
    eventually(lambda: http_endpoint.received("/c"))
    assert http_endpoint.received("/c")[0].headers["x-claro"] == "valor"


def test_secrets_key_without_the_crypto_extra_is_a_clear_config_error(pg_queue, tmp_path):
    # A real process where `cryptography` cannot be imported (as without the extra).
    blocker = tmp_path / "sem_crypto"
    (blocker / "cryptography").mkdir(parents=True)
    (blocker / "cryptography" / "__init__.py").write_text("raise ImportError('ausente')\n")
    env = pg_queue.env(WEBHOOK_SECRETS_KEY=FERNET_KEYS[0])
    code = (f"import sys, runpy; sys.path.insert(0, {str(blocker)!r}); "
            f"runpy.run_module({WEBHOOK!r}, run_name='__main__')")
    res = run_python(["-c", code], env=env, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "webhook-crypto" in res.stderr + res.stdout
    assert FERNET_KEYS[0] not in res.stderr + res.stdout


def test_cli_add_list_disable_enable_remove_and_rotate(pg_queue, http_endpoint):
    env = pg_queue.env()

    def cli(*args):
        return run_python(["-m", "nsj_queue_lib", "subscriber", *args], env=env, timeout=60)

    res = cli("add", "hook1", "--processo", "proc", "--url", http_endpoint.url + "/h1",
              "--header", "Authorization=Bearer abc123", "--header", "X-Origem=erp",
              "--generate-secret")
    assert res.returncode == 0, res.stderr
    secret = res.stdout.strip().split()[-1]
    assert secret.startswith("whsec_")
    assert cli("add", "metodo", "--processo", "proc").returncode == 0
    dup = cli("add", "hook1", "--processo", "proc", "--url", http_endpoint.url)
    assert dup.returncode == 1 and "já existe" in dup.stderr
    bad = cli("add", "x", "--processo", "proc", "--url", http_endpoint.url, "--secret", "abc")
    assert bad.returncode == 1 and "whsec_" in bad.stderr

    port = http_endpoint.httpd.server_address[1]
    assert cli("add", "credenciais", "--processo", "proc", "--url",
               f"http://fulano:senha9@127.0.0.1:{port}/h2?token=tok77#frag").returncode == 0
    listed = cli("list", "--json")
    assert listed.returncode == 0
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    # (user:password and the query string, which may carry tokens, are never listed)
    assert rows["credenciais"]["url"] == f"http://127.0.0.1:{port}/h2?…"
    for hidden in ("senha9", "fulano", "tok77", "frag"):
        assert hidden not in listed.stdout
    with admin_of(pg_queue) as admin:
        [api] = [r for r in admin.subscriber_list() if r["id"] == "credenciais"]
    assert api["url"] == f"http://127.0.0.1:{port}/h2?…"
    assert rows["hook1"]["headers"] == {"Authorization": "***", "X-Origem": "erp"}
    assert rows["hook1"]["assinada"] is True and rows["hook1"]["http_method"] == "POST"
    assert rows["metodo"]["url"] is None and rows["metodo"]["assinada"] is False
    assert secret not in listed.stdout and "abc123" not in listed.stdout
    text = cli("list")
    assert "hook1" in text.stdout and "abc123" not in text.stdout

    assert cli("disable", "hook1").returncode == 0
    assert pg_queue.value(f"SELECT ativo FROM {pg_queue.qsub_table} WHERE id = 'hook1'") is False
    assert cli("enable", "hook1").returncode == 0
    assert pg_queue.value(f"SELECT ativo FROM {pg_queue.qsub_table} WHERE id = 'hook1'") is True
    rot = cli("rotate-secret", "hook1", "--overlap", "1h")
    assert rot.returncode == 0 and secret not in rot.stdout
    assert pg_queue.value(f"SELECT segredo_anterior FROM {pg_queue.qsub_table} "
                          "WHERE id = 'hook1'") == secret
    unsigned = cli("rotate-secret", "credenciais")
    assert unsigned.returncode == 0, unsigned.stderr
    assert "anterior continua" not in unsigned.stdout and "não tinha segredo" in unsigned.stdout
    assert cli("remove", "credenciais").returncode == 0
    assert cli("remove", "metodo").returncode == 0
    missing = cli("remove", "metodo")
    assert missing.returncode == 1 and "não encontrada" in missing.stderr
    rows = pg_queue.sql(f"SELECT id FROM {pg_queue.qsub_table}")
    assert sorted(r["id"] for r in rows) == ["hook1"]
