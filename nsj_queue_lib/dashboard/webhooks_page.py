"""The dashboard's webhook page: subscriptions, their endpoint's breaker, last deliveries
(with a redelivery button for a signed-in browser)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from nsj_queue_lib.dashboard.pages import LIST_MESSAGE_PREVIEW, clip, e, fmt_time, url
from nsj_queue_lib.pubsub.breaker import ENDPOINTS_LISTED
from nsj_queue_lib.text import redact_url

SUBSCRIBERS_SHOWN = 50
DELIVERIES_SHOWN = 5


def _redeliver(table: str, csrf: Optional[str], delivery_id: Any) -> str:
    if csrf is None:
        return ""
    return ('<form class="inline" method="post" action="/acao">'
            '<input type="hidden" name="op" value="redeliver">'
            f'<input type="hidden" name="f" value="{e(table)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="id" value="{e(delivery_id)}">'
            '<button type="submit" data-acao="redeliver">Reentregar</button></form>')


def _deliveries(table: str, rows: List[Dict[str, Any]], csrf: Optional[str]) -> str:
    if not rows:
        return "<small>Nenhuma entrega registrada.</small>"
    items = []
    for d in rows:
        ok = "sucesso" if d["sucesso"] else "falha"
        items.append(
            f'<tr data-entrega="{e(d["id"])}"><td>#{e(d["id"])} <a href="'
            f'{e(url("/cadeia", f=table, id=d["tarefa_id"]))}">tarefa #{e(d["tarefa_id"])}</a>'
            f'</td><td><span class="tag {ok}">{e(d["status_http"] or "-")}</span> '
            f'(tentativa {e(d["tentativa"])})</td><td>{e(d["duracao_ms"])} ms</td>'
            f'<td class="msg">{clip(d["resposta"] or d["erro"], LIST_MESSAGE_PREVIEW)}</td>'
            f'<td>{fmt_time(d["data_hora"])}</td><td>{_redeliver(table, csrf, d["id"])}</td>'
            '</tr>')
    return ('<table><thead><tr><th>Entrega</th><th>HTTP</th><th>Duração</th>'
            '<th>Resposta / erro</th><th>Quando</th><th></th></tr></thead><tbody>'
            + "".join(items) + "</tbody></table>")


def webhooks_page(table: str, info: Dict[str, Any], csrf: Optional[str]) -> str:
    """`info`: {"assinaturas": [...], "entregas": {id: [...]}, "disjuntores": [...],
    "erro": str or None} (DashboardData.webhooks)."""
    if info.get("erro"):
        return (f'<section><h2>Webhooks de {e(table)}</h2><p data-campo="erro">'
                f'{e(info["erro"])}</p></section>')
    breakers = "".join(
        f'<tr data-endpoint="{e(b["endpoint"])}"><td>{e(b["endpoint"])}</td>'
        f'<td><span class="tag" data-campo="disjuntor">{e(b["estado"])}</span></td>'
        f'<td>{e(b["falhas"])}</td><td>{e(b["pausa"])} s</td></tr>'
        for b in info["disjuntores"]) or '<tr><td colspan="4">Nenhum endpoint com falhas.</td></tr>'
    if len(info["disjuntores"]) >= ENDPOINTS_LISTED:
        breakers += (f'<tr data-campo="cortado"><td colspan="4">Só os primeiros '
                     f'{ENDPOINTS_LISTED} endpoints (os não fechados primeiro).</td></tr>')
    subs = []
    for s in info["assinaturas"][:SUBSCRIBERS_SHOWN]:
        target = (f'{e(s["http_method"])} {e(redact_url(s["url"]))}' if s["url"]
                  else "método @Subscriber")
        subs.append(
            f'<section data-assinatura="{e(s["id"])}"><h3>{e(s["id"])} '
            f'<small>processo {e(s["processo"])}; {"ativa" if s["ativo"] else "inativa"}; '
            f'{"assinada" if s["assinada"] else "sem assinatura"}; disjuntor '
            f'{e(s["disjuntor"] or "-")}</small></h3><p>{target}</p>'
            + _deliveries(table, info["entregas"].get(s["id"], []), csrf) + "</section>")
    return (f'<section><h2>Webhooks de <a href="{e(url("/fila", f=table))}">{e(table)}</a>'
            '</h2><h3>Disjuntores por endpoint</h3><table><thead><tr><th>Endpoint</th>'
            '<th>Estado</th><th>Falhas seguidas</th><th>Pausa</th></tr></thead><tbody>'
            f'{breakers}</tbody></table></section>'
            + ("".join(subs) or "<section><p>Nenhuma assinatura.</p></section>"))
