"""HTML of the dashboard pages: server-side, escaped, no JavaScript, usable on a phone.

Every value that reaches the page goes through `e()` (html.escape); numbers the
tests read carry `data-campo` attributes.
"""

from __future__ import annotations

import datetime as _dt
import html
from typing import Any, Dict, List, Optional
from urllib.parse import urlencode

from nsj_queue_lib.dashboard.data import COUNT_CAP
from nsj_queue_lib.observability.status import fleet_detail
from nsj_queue_lib.text import duration

STYLE = """
*{box-sizing:border-box}body{font:15px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;
background:#f4f6f8}header{background:#123;color:#fff;padding:.6em 1em}header a{color:#fff;
text-decoration:none}main{padding:.8em;max-width:1100px;margin:auto}
section{background:#fff;border-radius:6px;padding:.8em;margin:0 0 1em;
box-shadow:0 1px 2px #0002}h1{font-size:1.2em;margin:0}h2{font-size:1.05em;margin:.2em 0 .6em}
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%}th,td{padding:.35em .5em;
border-bottom:1px solid #e3e7eb;text-align:left;vertical-align:top}td.n{text-align:right;
font-variant-numeric:tabular-nums}.msg{max-width:32em;word-break:break-word;font-size:.9em}
.tag{display:inline-block;padding:0 .45em;border-radius:4px;font-size:.85em;background:#e3e7eb}
.sucesso{background:#d4f4dd}.falha{background:#fbd5d5}.pendente,.agendada{background:#fff1c2}
.processando{background:#d6e8ff}.cancelada{background:#e5e5e5}.pausada{background:#fbd5d5}
.frota-mista{background:#ffe0b8}
form.inline{display:inline}button{font:inherit;padding:.35em .8em;border-radius:4px;
border:1px solid #567;background:#fff;cursor:pointer}button.perigo{border-color:#b22;color:#b22}
.aviso{padding:.5em .8em;border-radius:4px;margin-bottom:1em}.ok{background:#d4f4dd}
.erro{background:#fbd5d5}.grade{display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5em,1fr));
gap:.5em}.grade div{background:#f4f6f8;border-radius:4px;padding:.4em .6em;white-space:nowrap}
.grade b{display:block;font-size:1.4em}small{color:#567}input{font:inherit;padding:.3em}
"""


PAYLOAD_PREVIEW = 16 * 1024  # characters of a payload shown in the chain page
MESSAGE_PREVIEW = 4 * 1024   # characters of one message shown in a page
LIST_MESSAGE_PREVIEW = 500   # characters of a message in a list (failures, dead letters)


def e(value: Any) -> str:
    """Escaped text of any value ('' for None)."""
    return "" if value is None else html.escape(str(value), quote=True)


def clip(value: Any, limit: int = MESSAGE_PREVIEW) -> str:
    """Escaped text of `value`, cut at `limit` characters with a note of its length (a
    page stays small whatever a row holds)."""
    if value is None:
        return ""
    text = str(value)
    if len(text) <= limit:
        return e(text)
    return (f'{e(text[:limit])}<small data-campo="cortado"> … (cortado: {len(text)} '
            'caracteres)</small>')


def fmt_count(n: int) -> str:
    return f"{n}+" if n >= COUNT_CAP else str(n)


def fmt_time(value: Any) -> str:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return e(value)


def fmt_age(seconds: Optional[float]) -> str:
    return duration(seconds, missing="-", decimals=0)


def url(path: str, **params: Any) -> str:
    return path + ("?" + urlencode(params) if params else "")


def layout(title: str, body: str, *, logged_in: bool, actions_enabled: bool,
           notice: Optional[str] = None, error: Optional[str] = None) -> str:
    """The whole HTML document around `body` (already escaped HTML)."""
    if not actions_enabled:
        who = "<small>somente leitura</small>"
    elif logged_in:
        who = "<small>ações habilitadas</small>"
    else:
        who = f'<a href="{url("/entrar")}">entrar para ações</a>'
    banner = ""
    if notice:
        banner += f'<div class="aviso ok" role="status">{e(notice)}</div>'
    if error:
        banner += f'<div class="aviso erro" role="alert">{e(error)}</div>'
    return (
        "<!doctype html><html lang=\"pt-BR\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{e(title)} · nsj_queue_lib</title><style>{STYLE}</style></head><body>"
        f"<header><h1><a href=\"/\">Filas</a> · {e(title)}</h1>{who}</header>"
        f"<main>{banner}{body}</main></body></html>")


def chart(minutes: Dict[str, List[int]], width: int = 600, height: int = 120,
          compact: bool = False) -> str:
    """Stacked bars per minute of the last hour (sucesso, falha, cancelada) as inline SVG."""
    colors = {"sucesso": "#2e9e50", "falha": "#d33", "cancelada": "#999"}
    totals = [sum(minutes[k][i] for k in colors) for i in range(60)]
    peak = max(totals) or 1
    bar = width / 60
    parts: List[str] = []
    for i in range(60):
        y = float(height)
        for status, color in colors.items():
            n = minutes[status][i]
            if not n:
                continue
            h = n / peak * (height - 4)
            y -= h
            parts.append(f'<rect x="{i * bar:.1f}" y="{y:.1f}" width="{bar - 1:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>há {59 - i} min: {n} '
                         f'{status}</title></rect>')
    sums = {k: sum(v) for k, v in minutes.items()}
    label = (f"Última hora: {sums['sucesso']} sucesso, {sums['falha']} falha, "
             f"{sums['cancelada']} cancelada")
    axis = "" if compact else (
        f'<div style="display:flex;justify-content:space-between"><small>há 60 min · máx. '
        f'{peak}/min</small><small>agora</small></div>')
    return (f'<svg role="img" aria-label="{e(label)}" viewBox="0 0 {width} {height}" '
            f'width="100%" height="{height if not compact else 28}" '
            f'preserveAspectRatio="none" data-campo="grafico" data-sucesso="{sums["sucesso"]}" '
            f'data-falha="{sums["falha"]}"><title>{e(label)}</title>'
            f'<rect width="{width}" height="{height}" fill="#f4f6f8"/>{"".join(parts)}</svg>'
            f'{axis}')


def _action(op: str, table: str, csrf: Optional[str], label: str, task_id: Any = None,
            danger: bool = False) -> str:
    if csrf is None:
        return ""
    hidden = (f'<input type="hidden" name="op" value="{e(op)}">'
              f'<input type="hidden" name="f" value="{e(table)}">'
              f'<input type="hidden" name="csrf" value="{e(csrf)}">')
    if task_id is not None:
        hidden += f'<input type="hidden" name="id" value="{e(task_id)}">'
    cls = ' class="perigo"' if danger else ""
    return (f'<form class="inline" method="post" action="/acao">{hidden}'
            f'<button type="submit"{cls} data-acao="{e(op)}">{e(label)}</button></form>')


def overview(summaries: List[Dict[str, Any]], errors: Dict[str, str]) -> str:
    """The table of every queue: counts, dead letters, last-hour sparkline (or the error)."""
    rows = []
    for s in summaries:
        c = s["contagens"]
        t = s["fila"]
        tags = ' <span class="tag pausada">pausada</span>' if s["pausa"]["pausada"] else ""
        if (s.get("frota_mista") or {}).get("misto"):
            tags += (' <span class="tag frota-mista" data-campo="frota-mista" '
                     'title="modo de frota mista com a 1.2.2">frota mista 1.2.2</span>')
        rows.append(
            f'<tr data-fila="{e(t)}"><td><a href="{e(url("/fila", f=t))}">{e(t)}</a>{tags}</td>'
            + "".join(f'<td class="n" data-campo="{k}">{fmt_count(c.get(k, 0))}</td>'
                      for k in ("pendente", "agendada", "processando", "devidas"))
            + f'<td class="n" data-campo="mortas">{fmt_count(s["mortas"])}</td>'
            f'<td style="min-width:8em">{chart(s["ultima_hora"], compact=True)}</td></tr>')
    for t, msg in errors.items():
        rows.append(f'<tr data-fila="{e(t)}"><td>{e(t)}</td><td colspan="6" class="msg">'
                    f'erro: {e(msg)}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="7">Nenhuma fila encontrada neste banco.</td></tr>')
    return (
        '<section><h2>Filas deste banco</h2><div class="scroll"><table><thead><tr>'
        "<th>Fila</th><th>Pendentes</th><th>Agendadas</th><th>Em execução</th><th>Devidas</th>"
        "<th>Mortas</th><th>Última hora</th></tr></thead><tbody>" + "".join(rows)
        + "</tbody></table></div><small>Contagens das tarefas aguardando ou em execução (por "
        "índice, limitadas a " + str(COUNT_CAP) + "); mortas: cadeias da fila de mortos sem "
        "sucesso.</small></section>")


def fleet_line(fleet: Optional[Dict[str, Any]]) -> str:
    """The mixed-fleet mode with 1.2.2 (PostgreSQL), under the pause state; nothing on
    MySQL.  Changed with `nsj-queue compat on|off` (no button: turning it off checks for
    1.2.2 workers first)."""
    if not fleet or not fleet.get("aplica"):
        return ""
    on = bool(fleet.get("misto"))
    tag = (f'<span class="tag{" frota-mista" if on else ""}" data-campo="frota-mista">'
           f'{"ligado" if on else "desligado"}</span>')
    return (f'<p data-campo="frota-mista-linha">Modo de frota mista com a 1.2.2: {tag} '
            f'<small>{e(fleet_detail(fleet))}</small></p>')


def failures_section(t: str, failures: List[Dict[str, Any]], csrf: Optional[str]) -> str:
    """Recent failures (DashboardData.failures): chains that ended in 'falha' and chains
    waiting for their next attempt after a failure, with the failure's message and, for
    a signed-in browser, the retry button (QueueAdmin.retry: a new attempt for an ended
    chain; for a waiting one, its next attempt due now)."""
    rows = []
    for f in failures:
        root = f["id_inicial"]
        if f["aguardando"]:
            failed_attempt = int(f["tentativa"]) - 1
            state = (f'<span class="tag agendada">aguardando nova tentativa</span><br><small>'
                     f'tentativa {e(f["tentativa"])} prevista para {fmt_time(f["data_hora"])}'
                     '</small>')
            action = (_action("retry", t, csrf, "Tentar agora", root)
                      if f["status"] == "agendada" else "")
        else:
            failed_attempt = f["tentativa"]
            state = '<span class="tag falha">falha</span>'
            action = _action("retry", t, csrf, "Reenfileirar", root)
        rows.append(
            f'<tr data-falha="{e(root)}" data-situacao="'
            f'{"aguardando" if f["aguardando"] else "falha"}"><td><a href="'
            f'{e(url("/cadeia", f=t, id=root))}">#{e(root)}</a></td><td>{e(f["processo"])}</td>'
            f'<td class="n">{e(failed_attempt)}</td><td>{state}</td>'
            f'<td class="msg">{clip(f["mensagem"], LIST_MESSAGE_PREVIEW)}</td>'
            f'<td>{fmt_time(f["data_hora_inicial"])}</td><td>{action}</td></tr>')
    body = "".join(rows) or '<tr><td colspan="7">Nenhuma falha recente.</td></tr>'
    return ('<section><h2>Falhas recentes</h2><div class="scroll"><table><thead><tr>'
            '<th>Cadeia</th><th>Processo</th><th>Tentativa que falhou</th><th>Situação</th>'
            '<th>Mensagem</th><th>Início</th><th></th></tr></thead>'
            f'<tbody data-campo="falhas">{body}</tbody></table></div><small>Cadeias cuja '
            'última tentativa falhou, terminadas ou aguardando a próxima tentativa, das mais '
            'novas para as mais antigas (as da fila de mortos estão abaixo).</small></section>')


def queue_page(s: Dict[str, Any], dead: List[Dict[str, Any]], csrf: Optional[str],
               failures: Optional[List[Dict[str, Any]]] = None) -> str:
    """One queue: counts, pause state, mixed-fleet mode, oldest due task, last-hour chart,
    recent failures, dead letters.  Action buttons only when `csrf` is given (a
    signed-in browser)."""
    t = s["fila"]
    c = s["contagens"]
    pause = s["pausa"]
    cards = "".join(f'<div>{label}<b data-campo="{k}">{fmt_count(c.get(k, 0))}</b></div>'
                    for k, label in (("pendente", "Pendentes"), ("agendada", "Agendadas"),
                                     ("processando", "Em execução"), ("devidas", "Devidas")))
    cards += f'<div>Mortas<b data-campo="mortas">{fmt_count(s["mortas"])}</b></div>'
    for k, label in (("sucesso", "Sucesso, 1 h"), ("falha", "Falha, 1 h"),
                     ("cancelada", "Canceladas, 1 h")):
        cards += f'<div>{label}<b data-campo="hora-{k}">{sum(s["ultima_hora"][k])}</b></div>'
    oldest = s["mais_antiga_devida"]
    if oldest:
        oldest_html = (f'<p data-campo="mais-antiga">Devida mais antiga: <a href="'
                       f'{e(url("/cadeia", f=t, id=oldest["id"]))}">#{e(oldest["id"])}</a> '
                       f'({e(oldest["processo"])}, tentativa {e(oldest["tentativa"])}), '
                       f'espera há {fmt_age(oldest["atraso"])}</p>')
    else:
        oldest_html = '<p data-campo="mais-antiga">Nenhuma tarefa devida aguardando.</p>'
    if pause["pausada"]:
        state = (f'<p><span class="tag pausada" data-campo="pausa">pausada</span> '
                 f'{e(pause.get("motivo") or "")} {e(pause.get("alterado_por") or "")} '
                 + _action("resume", t, csrf, "Retomar a fila") + "</p>")
    else:
        state = ('<p><span class="tag" data-campo="pausa">ativa</span> '
                 + (_action("pause", t, csrf, "Pausar a fila", danger=True)
                    if pause.get("controle") else "") + "</p>")
    state += fleet_line(s.get("frota_mista"))
    dead_rows = []
    for d in dead:
        dead_rows.append(
            f'<tr data-morta="{e(d["id"])}"><td><a href="{e(url("/cadeia", f=t, id=d["id"]))}">'
            f'#{e(d["id"])}</a><br><small>original <a href="'
            f'{e(url("/cadeia", f=t, id=d["live_id"]))}">#{e(d["live_id"])}</a></small></td>'
            f'<td>{e(d["processo"])}</td><td><span class="tag {e(d["status"])}">'
            f'{e(d["status"])}</span> ({e(d["tentativa"])})</td>'
            f'<td class="msg">{clip(d["erro_original"], LIST_MESSAGE_PREVIEW)}'
            + (f'<br><small>na fila de mortos: {clip(d["mensagem"], LIST_MESSAGE_PREVIEW)}'
               '</small>' if d["mensagem"] else "")
            + f'</td><td>{fmt_time(d["data_hora_inicial"])}</td><td>'
            + (_action("retry", t, csrf, "Reenfileirar", d["id"]) if d["status"] in
               ("falha", "cancelada") else "") + "</td></tr>")
    schedule_rows = "".join(
        f'<tr data-agendamento="{e(r["nome"])}"><td>{e(r["nome"])}</td><td>{e(r["regra"])}</td>'
        f'<td>{e(r["processo"])}</td><td>{fmt_time(r["proximo"])}</td>'
        f'<td>{fmt_time(r["ultimo_slot"]) if r["ultimo_slot"] else "-"}</td></tr>'
        for r in s.get("agendamentos") or [])
    schedules_html = (
        '<section><h2>Tarefas periódicas</h2><div class="scroll"><table><thead><tr>'
        '<th>Nome</th><th>Regra</th><th>Processo</th><th>Próximo</th><th>Último</th></tr>'
        f'</thead><tbody>{schedule_rows}</tbody></table></div></section>'
        if schedule_rows else "")
    limit_rows = "".join(
        f'<tr data-limite="{e(r["processo"])}"><td>{e(r["processo"])}</td>'
        f'<td>{e(r["em_execucao"])}</td><td>{e(r["maximo"])}</td></tr>'
        for r in s.get("limites") or [])
    limits_html = (
        '<section><h2>Limites de concorrência</h2><div class="scroll"><table><thead><tr>'
        '<th>Processo</th><th>Em execução</th><th>Limite</th></tr>'
        f'</thead><tbody>{limit_rows}</tbody></table></div></section>'
        if limit_rows else "")
    ordering = s.get("ordenacao") or {}
    if ordering.get("tenants_devidos", 0) > 1:
        limits_html += (
            f'<section><h2>Tenants</h2><p data-campo="tenants">{e(ordering["tenants_devidos"])} '
            'tenants com tarefas devidas (QUEUE_FAIR_TENANTS alterna entre eles).</p></section>')
    if ordering.get("chaves"):
        limits_html += (
            f'<section><h2>Execução ordenada</h2><p data-campo="ordenacao">'
            f'{e(ordering["chaves"])} chave(s) de ordem com {e(ordering["tarefas"])} '
            'tarefa(s) esperando ou em execução (uma por vez por chave).</p></section>')
    dead_html = ("".join(dead_rows) or
                 '<tr><td colspan="6">Nenhuma tarefa morta aguardando.</td></tr>')
    return (
        f'<section><h2>Fila {e(t)}</h2>{state}<div class="grade">{cards}</div>{oldest_html}'
        f'<p><a data-campo="webhooks" href="{e(url("/webhooks", f=t))}">Assinaturas e '
        'webhooks</a></p>'
        f'<form method="get" action="/cadeia"><input type="hidden" name="f" value="{e(t)}">'
        '<label>Ver tarefa <input name="id" inputmode="numeric" size="10" required></label> '
        '<button type="submit">Abrir</button></form></section>'
        f'<section><h2>Terminadas na última hora (por minuto)</h2>{chart(s["ultima_hora"])}'
        '<small>Tentativas terminadas cujo horário previsto (data_hora) está na última hora: '
        'verde sucesso, vermelho falha, cinza cancelada.</small></section>'
        + schedules_html + limits_html
        + (failures_section(t, failures, csrf) if failures is not None else "")
        + '<section><h2>Fila de mortos</h2><div class="scroll"><table><thead><tr><th>Cadeia</th>'
        '<th>Processo</th><th>Status</th><th>Último erro</th><th>Início</th><th></th></tr>'
        f'</thead><tbody>{dead_html}</tbody></table></div></section>')


def chain_page(table: str, chain: Dict[str, Any], csrf: Optional[str]) -> str:
    """A chain (QueueAdmin.show) with every attempt, its links and its actions."""
    rows = []
    for a in chain["tentativas"]:
        rows.append(
            f'<tr data-tentativa="{e(a["id"])}"><td>#{e(a["id"])}</td>'
            f'<td class="n">{e(a["tentativa"])}</td><td><span class="tag {e(a["status"])}">'
            f'{e(a["status"])}</span>{" (reenfileirada)" if a["reenfileirado"] else ""}</td>'
            f'<td>{fmt_time(a["data_hora"])}</td><td class="msg">{clip(a["mensagem"])}</td></tr>')
    root = chain["id_inicial"]
    first = chain["tentativas"][0]
    links = []
    if chain["cadeia_viva"]:
        live = chain["cadeia_viva"]
        links.append(f'Cadeia original: <a href="{e(url("/cadeia", f=table, id=live))}">'
                     f'#{e(live)}</a>')
    for d in chain["cadeias_mortas"]:
        links.append(f'Fila de mortos: <a href="{e(url("/cadeia", f=table, id=d))}">#{e(d)}</a>')
    for sub in chain["assinaturas"]:
        links.append(f'Assinante {e(sub["subscriber_id"])}: <a href="'
                     f'{e(url("/cadeia", f=table, id=sub["id"]))}">#{e(sub["id"])}</a> '
                     f'({e(sub["status"])})')
    actions = ""
    if chain["status"] in ("falha", "cancelada"):
        actions += _action("retry", table, csrf, "Reenfileirar a cadeia", root)
    if chain["status"] in ("pendente", "agendada"):
        actions += _action("cancel", table, csrf, "Cancelar a tarefa", root, danger=True)
    payload = first.get("payload")
    payload_html = ""
    if payload:
        full = url("/payload", f=table, id=root)
        if len(payload) > PAYLOAD_PREVIEW:
            payload_html = (
                f'<details open><summary>Payload ({len(payload)} caracteres; mostrando os '
                f'primeiros {PAYLOAD_PREVIEW})</summary><pre class="msg" data-campo="payload">'
                f'{e(payload[:PAYLOAD_PREVIEW])}</pre><p data-campo="payload-cortado">Payload '
                f'cortado. <a href="{e(full)}">Ver o payload completo</a> (texto, '
                f'{len(payload)} caracteres).</p></details>')
        else:
            payload_html = (f'<details><summary>Payload</summary><pre class="msg" '
                            f'data-campo="payload">{e(payload)}</pre><small><a href="{e(full)}">'
                            'como texto</a></small></details>')
    return (
        f'<section><h2>Cadeia #{e(root)} <span class="tag {e(chain["status"])}" '
        f'data-campo="status">{e(chain["status"])}</span></h2>'
        f'<p>{e(first["processo"])} · origem {e(first["origem"])} · destino '
        f'{e(first["destino"])} · chave {e(first["chave_externa"])}'
        + (f' · chave única <span data-campo="chave-unica">{e(first["chave_unica"])}</span>'
           if first.get("chave_unica") else "")
        + f'{" · fila de mortos" if first["dead"] else ""}</p>'
        f'<p>{"<br>".join(links)}</p><p>{actions}</p>'
        '<div class="scroll"><table><thead><tr><th>Id</th><th>Tentativa</th><th>Status</th>'
        f'<th>Horário</th><th>Mensagem</th></tr></thead><tbody>{"".join(rows)}</tbody>'
        '</table></div>'
        + payload_html
        + f'<p><a href="{e(url("/fila", f=table))}">voltar à fila</a></p></section>')


def login_page(failed: bool = False) -> str:
    """The form that exchanges DASHBOARD_TOKEN for the session cookie."""
    return ('<section><h2>Entrar para ações</h2>'
            + ('<p class="aviso erro">Token inválido.</p>' if failed else "")
            + '<form method="post" action="/entrar"><label>Token de ações (DASHBOARD_TOKEN) '
            '<input type="password" name="token" autocomplete="current-password" required>'
            '</label> <button type="submit">Entrar</button></form></section>')
