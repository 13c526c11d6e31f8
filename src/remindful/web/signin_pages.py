"""The pages the gate itself shows a browser: "sign in" (no session here), "link used or expired",
and "signed in". Standard library only, like the gate.

Each page carries its style and its one small script inline, allowed by their SHA-256 in the page's
own ``Content-Security-Policy`` (:func:`page_csp`): nothing is loaded from the server, which serves
nothing else to a browser without a session.

How a bookmark of the dashboard works: the browser's session lives under its own random path
``/s/<random>/`` (its cookie is scoped to that path, see :mod:`remindful.web.signin`), so the server
cannot tell, at ``/``, which browser asks. The browser can: every dashboard page keeps its path in the
origin's ``localStorage`` (``remindful.home``; per scheme, host *and port*, so no other server on
127.0.0.1 reads it). The sign-in page's script sends a browser that has one there, from ``/`` (or any
page outside its session, an old session's bookmark included) to the same page under its session.
Where the stored session is gone (the dashboard was restarted), the sign-in page comes back under that
very path: the script forgets it and shows how to get a link.
"""

from __future__ import annotations

import base64
import hashlib
import html

#: The ``localStorage`` key under which dashboard pages keep their session's path (dashboard.js).
HOME_KEY = "remindful.home"

_STYLE = """
:root{--fg:#1d2330;--muted:#6b7385;--line:#e3e6ec;--bg:#f7f8fa;--accent:#3559d6}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:10px 24px;background:#1d2330;color:#fff;font-weight:700;font-size:16px}
main{max-width:620px;margin:48px auto;padding:28px 32px;background:#fff;border:1px solid var(--line);border-radius:8px}
h1{font-size:22px;margin:0 0 12px}
p,li{margin:8px 0}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13.5px;background:#eef0f5;
padding:1px 5px;border-radius:3px}
a{color:var(--accent)}
.muted{color:var(--muted);font-size:13.5px}
"""

#: Moves a browser that knows its session's path there (see the module docstring).
_SCRIPT = (
    "(function(){var k=%s,h=null;try{h=localStorage.getItem(k)}catch(e){}"
    "var ok=/^\\/s\\/[A-Za-z0-9_-]{20,64}\\/$/;if(!h||!ok.test(h))return;"
    "var p=location.pathname;if(p.indexOf(h)===0){try{localStorage.removeItem(k)}catch(e){}return}"
    "var rest=p.replace(/^\\/s\\/[A-Za-z0-9_-]{20,64}\\//,'/').replace(/^\\/+/,'');"
    "var q=location.search;if(rest==='login'){rest='';q=''}location.replace(h+rest+q)})();"
) % ('"' + HOME_KEY + '"')


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def page_csp(*, script: bool) -> bytes:
    """The ``Content-Security-Policy`` of a gate page: only its inline style (and script)."""
    scripts = f"'{_sha256(_SCRIPT)}'" if script else "'none'"
    return (
        f"default-src 'none'; img-src data:; style-src '{_sha256(_STYLE)}'; script-src {scripts}; "
        "frame-ancestors 'none'; form-action 'none'; base-uri 'none'"
    ).encode()


def _page(title: str, body: str, *, head: str = "", script: bool = False) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,">{head}<title>{html.escape(title)} · remindful</title>'
        f"<style>{_STYLE}</style>" + (f"<script>{_SCRIPT}</script>" if script else "") + "</head>"
        f'<body><header>remindful</header><main id="gate-page">{body}</main></body></html>\n'
    )


_HOW = (
    "<p>To get a sign-in link, run <code>remindful dashboard</code> in a terminal: it prints one and "
    "opens this browser on it. A link works once, within two minutes; press <b>Enter</b> in that terminal "
    "for a new link.</p>"
    "<p>A running dashboard (the daemon's too) also gives a new link to a client holding the store's "
    "token (<code>remindful token</code>): <code>POST /login</code> with "
    "<code>Authorization: Bearer &lt;token&gt;</code>.</p>"
    '<p class="muted">Once signed in, this address takes this browser to its dashboard: bookmark it. '
    "The sign-in lasts until the dashboard stops.</p>"
)


def sign_in_page() -> str:
    """The page for a browser without a session here (answered with 401)."""
    body = "<h1>Sign in to the remindful dashboard</h1><p>This browser is not signed in here.</p>" + _HOW
    return _page("Sign in", body, script=True)


def code_refused_page() -> str:
    """The page for a sign-in link that was used already or has expired (answered with 401)."""
    body = (
        "<h1>This sign-in link has been used or has expired</h1><p>Each link works once, within two minutes.</p>" + _HOW
    )
    return _page("Link used or expired", body, script=True)


def signed_in_page(root: str) -> str:
    """The page that has just set the session's cookie and goes on to ``root + "/"`` by itself (a
    page, not a redirect: see :meth:`remindful.web.gate.BearerGate._sign_in`)."""
    target = html.escape(root + "/", quote=True)
    head = f'<meta http-equiv="refresh" content="0;url={target}">'
    body = (
        "<h1>Signed in</h1>"
        f'<p>Opening the dashboard… <a id="open-dashboard" href="{target}">Open it</a> if nothing happens.</p>'
        '<p class="muted">Bookmark the dashboard\'s address: in this browser it leads to the dashboard as '
        "long as the dashboard runs.</p>"
    )
    return _page("Signed in", body, head=head)


__all__ = ["HOME_KEY", "code_refused_page", "page_csp", "sign_in_page", "signed_in_page"]
