"""Redaction rules: secrets are replaced before anything is written (standard library only).

One redactor serves every write: :meth:`Redactor.redact` for a text, :meth:`Redactor.redact_value`
for any JSON-like value at any depth (dict keys and values, lists), :meth:`Redactor.redact_session_id`
for a session id (which must stay usable as a key). Hook processes import this module, so it uses
the standard library only and compiles a built-in rule only when a cheap substring test says it
may match.

Built-in rules (:data:`DEFAULT_REDACTIONS`), in the order they run:

- whole blocks: PEM private keys (a block cut short by a chunk boundary too: a ``BEGIN`` without
  its ``END`` is redacted to the end of the text, the key lines before an ``END`` without its
  ``BEGIN`` are redacted back to the last word that is not key material), ``<private>…</private>``;
- tokens recognised by their shape: JWTs, AWS access key ids, GitHub (``ghp_``/``gho_``/``ghu_``/
  ``ghs_``/``ghr_``, ``github_pat_``), Slack (``xox?-``, ``xapp-``, webhook URLs), Stripe
  (``sk_live_``/``sk_test_``/``rk_…``, ``whsec_``), Google (``AIza…``, ``ya29.``), Hugging Face
  (``hf_``), GitLab, npm, PyPI, DigitalOcean, Shopify and SendGrid tokens, OpenAI-style ``sk-``
  keys;
- credentials by their place: the password of a URL (``postgres://user:[REDACTED]@host``: scheme,
  user and host kept), ``Authorization:`` headers (the scheme kept: ``Bearer [REDACTED]``) and a
  bare ``Bearer <token>``, ``Cookie:`` headers, ``curl -u user:password``, command-line flags
  (``--password X``, ``--api-key=X``), and assignments to a secret-looking name
  (``password=…``, ``"api_key": "…"``, ``DATABASE_PASSWORD=…``, ``export PGPASSWORD='…'``,
  ``MYSQL_PWD=…``, ``SECRET_KEY=…``, ``clientSecret: …``; the name is kept, the value replaced);
- payment cards (13-19 digits passing the Luhn check, and any bare run of exactly 16 digits, the
  specification's own ``\\b\\d{16}\\b``, not inside a longer token such as a hex digest; glued
  to a dash or an underscore, as a part of an id, only 15 or 16 digits; a bare 13-, 16- or 19-digit number
  starting with 1 is an epoch time in ms/µs/ns and is kept) and emails (``git@host`` is an SSH
  address, not an email, and is kept).

What is deliberately left alone, so that ordinary memories survive: git SHAs, UUIDs, timestamps,
ports (``localhost:8080``), ``user@host`` without a password, and prose that names a secret
without giving one ("rotate the token: see the runbook", ``max_tokens=4096``, ``password_hash``,
``token == expected``). An assignment's value is kept when it is a placeholder (``$VAR``,
``${{ secrets.X }}``, ``<your-token>``, ``{password}``, ``%s``, ``****``, ``[REDACTED]``), a
literal such as ``null``/``true``/``str``, a code expression (``os.environ["X"]``,
``getpass()``, ``self.password``), shorter than 3 characters, or, after a bare lowercase word and
a colon, one short word ("Password: required"). Those heuristics can miss a weak password written
as prose ("password: hunter"), and an unencoded ``/`` in a URL's password ends the password (the
host is kept). A bare value goes on through ``&``, ``;``, ``,``, brackets and backslashes inside
it (``Tr0ub4dor&3x9q``, ``Sup3r(S3cret)!``) and ends where one starts another field (``&page=2``,
``, user=bob``, ``;User Id=``, `` && make``): it would rather take a word too many than leave a
piece of the secret. A password is found in prose too: "the password for the staging db is X",
"my passphrase was X", "API key: X", in other languages "das Passwort ist X"; a token or secret
likewise ("the session token is X") when X holds letters and digits, 8 characters or more.

A session id is an id, not a text: :meth:`Redactor.redact_session_id` keeps it stable and distinct
(see there); callers check session exclusions (``privacy.exclude_sessions``) on the raw id first.

:class:`StoreRedactor` is these rules bound to one storage directory: the one redactor every write
of that store passes (the catalog's row and session writes, the spool, the audit log, reinforcement
queries), with the store's own key for session-id digests (:func:`session_key`), which a hook
process reads as well.

:meth:`Redactor.redact_value` also replaces the whole value of a field whose name looks like a
secret (``{"password": …}``, ``{"api_key": …}``, ``{"clientSecret": …}``, ``{"Authorization": …}``;
:func:`is_secret_name`) whatever its type, except ``None``, booleans and ``""``, which hold no
secret; and the value fields of a ``{"name": "DB_PASSWORD", "value": …}``-style entry
(Kubernetes env lists, ``{"setting": …, "new_value": …}``).
"""

from __future__ import annotations

import functools  # re imports it: free for hook processes
import os
import re
from collections.abc import Callable, Iterator, Mapping

from remindful.owned import private_dir, secret_key
from remindful.runtime import SESSION_ID_MAX_CHARS

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

#: What the value of a secret-named field (``{"password": ...}``) becomes, whatever it held.
FIELD_REPLACEMENT = "[REDACTED]"

# Words that make a name secret-looking, as the last part of the name (case-insensitive):
# ``password``, ``DATABASE_PASSWORD``, ``clientSecret``, ``x-api-key``, ``AWS_SECRET_ACCESS_KEY``.
# "password" in other languages (a name of its own, as ``password`` is).
_PASSWORD_WORDS = (
    r"contrase(?:ñ|n)a|passwort|kennwort|пароль|密码|口令|mot de passe|senha|wachtwoord|hasło|parola"
    r"|パスワード|비밀번호"
)
# More words for a password, said in prose only ("lösenordet är X", "şifre: X"): in the assignment
# rules too they cost every text ~4 us more for a form configuration files do not use.
_SAID_PASSWORD_WORDS = r"şifre|lösenord(?:et)?|mdp|clave|heslo|jelszó|salasana|adgangskode|passord"
_SECRET_WORDS = (
    r"pass(?:word|wd|phrase|code)|secret[_-]?key[_-]?base|secret|token|credentials?|auth|psk"
    r"|(?:api|access|secret|private|signing|encryption|master|client|app|auth|license|account|subscription"
    r"|storage|fernet)[_-]?key|apikey|(?:client|private)[_-]?key[_-]?data"
    rf"|{_PASSWORD_WORDS}"
)
# The start of such a word: a name boundary (start, ``_``, ``-``, ``.``, a quote, a space), a
# camelCase step (``dbPassword``), or an upper-case run glued to PASSWORD (``PGPASSWORD``). ``pass``
# and ``pwd`` alone count only after ``_``/``-``/``.`` (``SMTP_PASS``, ``MYSQL_PWD``): ``PWD`` alone
# is the working directory and ``bypass`` is a word.
_SECRET_NAME = (
    rf"(?:(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=PASS))(?i:{_SECRET_WORDS})"
    r"|(?<=[_.-])(?i:pass|pwd|pw)(?![A-Za-z0-9]))"
)
# An assignment's value: quoted (spaces allowed), an escaped quote (JSON inside a string), or bare
# up to whitespace, a quote or a separator. A separator that does not start another field is part
# of a bare value (``Tr0ub4dor&3x9q``, ``P@ss;w0rd``, ``P@ss,w0rd``, ``Sup3r(S3cret)!``): cut
# there, the rest of the password would be kept. What ends one: ``&`` before the next query
# parameter (``&page=2``), a shell's ``&&`` before a space or a command (``&&make``, a word of
# letters, digits, ``.``, ``/`` and ``-`` up to a space: ``a0&&0120!`` is one password) or ``&``
# at a word's end; ``;`` or ``,`` (one or two: ``a0,,0120!`` is one password) before a
# space, the text's end or the next ``key=``/``key:``; a closing bracket the value did not open,
# unless more of the word follows it (``connect(password=abc)`` ends at
# ``abc``, ``ab)c9`` and ``ab).c9`` do not); a backslash that escapes no quote, line or tab
# (``P4ss\\w0rd``).
_BARE_SEPARATOR = (
    r"&(?![&\s]|$|[A-Za-z_][\w.\[\]-]{0,64}=)"
    r"|&&(?![&\s]|$|[A-Za-z./][\w./-]*(?:\s|$))"
    r"|;;?(?![;\s]|$|[A-Za-z_][\w .-]{0,64}=)"
    r"|,,?(?![,\s]|$|[\w.-]{1,64}[ \t]*[=:])"
)
_BARE_JOIN = (
    _BARE_SEPARATOR + r"|\((?=[^\s\"'`\\()]{0,256}\))[^\s\"'`\\()]{0,256}\)"
    r"|[)\]}]+(?=[^\s\"'`\\,;&)\]}.]|\.[)\]}]*[^\s\"'`\\,;&)\]}.]|" + _BARE_SEPARATOR + ")"
    r"|\\(?![ntru\"'\\])"
)
_VALUE = (
    r"(?P<q>[\"'`])(?P<quoted>(?:(?!(?P=q))[^\n\\]|\\.){1,1024})(?P=q)"
    r"|(?P<eq>\\[\"'])(?P<equoted>[^\n\\\"'`]{1,1024})(?P=eq)"
    rf"|(?P<bare>(?>{_BARE_JOIN}|[^\s\"'`\\,;&)\]}}]){{1,1024}})"
)

# Words of prose no seed phrase holds (BIP-39's list has none of them): "the phrase is written on
# paper and kept in the safe" is no seed.
_PROSE_WORDS = (
    "the|and|for|with|that|this|from|are|was|were|have|has|had|they|you|she|will|would|can|could"
    "|should|there|their|then|than|which|what|when|where|who|how|into|its|our|your|been|being|does|did|not|but"
)

# What joins a secret's name to its value in prose: "for" a place, if any, then "is" or "was" (perhaps
# "there is", "is still", "is now") or "'s": "the password for grafana is still X", "my password's X",
# "the password there is X".
_SAID_IS = (
    r"(?:[ \t]+(?i:for|of|to)(?:[ \t]+[\w.@:/-]{1,64}){1,3}?)?"
    r"(?:[ \t]+(?i:there|here|now|then|today|currently))?"
    r"(?:[ \t]+(?i:is|was|è)(?:[ \t]+(?i:still|now|currently|just|always|also|actually))?[ \t]+|['\u2019]s[ \t]+)"
)
# What has a code or a combination: "the door code is X", "the safe combination is X".
_CODE_PLACES = r"door|gate|alarm|garage|lock|entry|building|keypad|safe"

# A file named for secrets: rsyncd.secrets, .htpasswd, passwords.txt, credentials, rsync.pass.
_SECRETS_FILE = r"(?i:secret|password|htpasswd|credential|passfile|\.pass\b)"
# What reads a password from its input (a here-string's or a here-document's): sudo -S, passwd,
# chpasswd, smbpasswd, kinit, cryptsetup, htpasswd, gpg --passphrase-fd 0, openssl -pass stdin, a
# registry login --password-stdin, vault login, gh auth login --with-token; and cat or tee writing
# a file named for secrets.
_STDIN_READERS = (
    r"sudo[ \t]+(?:[^\n|;&<]{0,256}?[ \t])?(?:-[A-Za-z]*S\b|--stdin\b)"
    r"|(?:passwd|chpasswd|smbpasswd|kinit|cryptsetup|htpasswd|mysql_config_editor)\b"
    r"|gpg\b(?=[^\n|;&<]{0,512}--passphrase-fd[ \t]+0)|openssl\b(?=[^\n|;&<]{0,512}-pass(?:in)?[ \t]+stdin)"
    r"|(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|helm)\b(?=[^\n|;&<]{0,512}--password-stdin)"
    r"|vault[ \t]+login\b|gh[ \t]+auth[ \t]+login\b(?=[^\n|;&<]{0,512}--with-token)"
    rf"|(?:cat|tee)\b(?=[^\n]{{0,512}}{_SECRETS_FILE})"
)
# The commands whose lines are "user:password" (the user is kept), and those others that read
# every line of a here-document as a password (the rest read the first: sudo -S CMD's other lines
# are CMD's input).
_USER_LINES = frozenset(("chpasswd", "cat", "tee", "echo", "printf", "less", "more", "head", "tail", "bat"))
_LINES_ALL = frozenset(("passwd", "smbpasswd"))

#: Built-in rules: (name, pattern, replacement). Order matters: whole blocks first, tokens by
#: shape next, credentials by their place (which skip what is already redacted) late.
DEFAULT_REDACTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "pem_private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        "[PRIVATE_KEY_REDACTED]",
    ),
    # The tail of a key whose BEGIN went to another chunk: the key lines before it are found by
    # walking back from the END (:func:`_redact_pem_tails`), which a regex could only do in
    # quadratic time.
    ("pem_private_key_tail", r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", "[PRIVATE_KEY_REDACTED]"),
    ("private_block", r"<private>[\s\S]*?(?:</private>|\Z)", "[PRIVATE_REDACTED]"),
    # A PuTTY key file's private lines (to their MAC, or to the end of a text cut short).
    (
        "putty_private_key",
        r"(Private-(?:Lines|MAC):)[ \t]*[0-9A-Za-z+/=]+(?:[ \t]*\r?\n[ \t]*(?!Private-)[A-Za-z0-9+/=]{4,})*",
        r"\1 [PRIVATE_KEY_REDACTED]",
    ),
    # Key material without its BEGIN line: two or more lines of one long base64 word each, a line
    # number (cat -n, grep -n) before it allowed (:func:`_redact_key_lines`).
    (
        "key_lines",
        r"(?m)^(?:[ \t]*\d{1,6}(?:\t|:| {1,2})|[\w./~-]{1,256}:\d{1,6}:)?[ \t]*[A-Za-z0-9+/]{40,}={0,2}[ \t]*\r?$",
        "[KEY_REDACTED]",
    ),
    # A private key in base64 (kubeconfig ``client-key-data``): "-----BEGIN " encodes to "LS0tLS1CRUdJTi".
    ("encoded_private_key", r"(?<![A-Za-z0-9+/])LS0tLS1CRUdJTi[A-Za-z0-9+/]{16,}={0,2}", "[PRIVATE_KEY_REDACTED]"),
    ("jwt", r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}", "[JWT_REDACTED]"),
    (
        "aws_access_key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ABIA|ACCA|ANPA|ANVA|AIPA)[0-9A-Z]{16}(?![A-Z0-9])",
        "[AWS_KEY_REDACTED]",
    ),
    (
        "github_token",
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})",
        "[GITHUB_TOKEN_REDACTED]",
    ),
    (
        "slack_token",
        r"(?<![A-Za-z0-9])(?:xox[a-z]|xapp)-[0-9A-Za-z-]{10,}"
        r"|hooks\.slack\.com/(?:services|workflows|triggers)/[0-9A-Za-z/_-]{10,}",
        "[SLACK_TOKEN_REDACTED]",
    ),
    (
        "stripe_key",
        r"(?<![A-Za-z0-9])(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|(?<![A-Za-z0-9])whsec_[0-9A-Za-z]{16,}",
        "[STRIPE_KEY_REDACTED]",
    ),
    (
        "google_api_key",
        r"(?<![0-9A-Za-z])AIza[0-9A-Za-z_-]{30,}|(?<![A-Za-z0-9])ya29\.[0-9A-Za-z_-]{20,}",
        "[GOOGLE_KEY_REDACTED]",
    ),
    ("huggingface_token", r"(?<![A-Za-z0-9])hf_[0-9A-Za-z]{30,}", "[HF_TOKEN_REDACTED]"),
    # GitLab (glpat-, a runner's glrt-), npm, PyPI, DigitalOcean, Shopify, SendGrid, Supabase (sbp_),
    # Perplexity (pplx-), Fireworks (fw_), LangSmith (lsv2_pt_/lsv2_sk_) and an Azure AD client
    # secret (…8Q~…).
    (
        "vendor_token",
        r"(?<![A-Za-z0-9])(?:glpat-[0-9A-Za-z_-]{20,}|npm_[0-9A-Za-z]{36,}|pypi-AgE[0-9A-Za-z_-]{50,}|dop_v1_[0-9a-f]{64}"
        r"|shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}|SG\.[0-9A-Za-z_-]{16,}\.[0-9A-Za-z_-]{16,}"
        r"|sbp_[0-9a-f]{40}|pplx-[0-9a-f]{48}|fw_[0-9A-Za-z]{24}|lsv2_(?:pt|sk)_[0-9a-f]{32}_[0-9a-f]{10}"
        r"|glrt-[0-9A-Za-z_-]{20,}"
        r"|[0-9A-Za-z_.-]{3}\dQ~[0-9A-Za-z_~.-]{31,34})",
        "[TOKEN_REDACTED]",
    ),
    # Vault (hvs./hvb./hvr.), age, Mailgun (key-… and the newer 32-8-8 hex), Twilio (an AC/SK id and
    # the auth token written after it), Pulumi (pul-), New Relic (a user key NRAK-…, a license key
    # ending NRAL), Telegram bots, Discord bots and webhooks, and the webhook
    # addresses of Microsoft Teams (Office 365 connectors) and Zapier, whose path is the secret.
    (
        "service_token",
        r"(?<![A-Za-z0-9])(?:hv[sbr]\.[A-Za-z0-9_-]{24,}|AGE-SECRET-KEY-1[0-9A-Z]{50,}|key-[0-9a-f]{32}"
        r"|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}|(?:AC|SK)[0-9a-f]{32}(?:[\"']?[ \t]*[,:][ \t]*[\"']?[0-9a-f]{32})?"
        r"|[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"
        r"|pul-[0-9a-f]{40}|NRAK-[A-Z0-9]{27}|[0-9a-f]{36}NRAL)(?![A-Za-z0-9])"
        r"|discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{30,}"
        r"|(?<![\w.-])[\w-]{1,64}\.webhook\.office\.com/webhookb2/[\w@/-]{40,1024}"
        r"|outlook\.office(?:365)?\.com/webhook/[\w@/-]{40,1024}"
        r"|hooks\.zapier\.com/hooks/catch/\d+/[0-9a-z]{4,64}"
        r"|(?<![0-9])\d{8,10}:AA[0-9A-Za-z_-]{30,}",
        "[TOKEN_REDACTED]",
    ),
    # OpenAI (sk-…, sk-proj-…, sk-svcacct-…, sk-admin-…) and Anthropic (sk-ant-api03-…): letters,
    # digits, _ and -. A bare ``sk-`` word needs a digit (``sk-learn-compatible-estimators`` is
    # none); a named kind does not: about one random key in 5,000 has no digit.
    (
        "api_key",
        r"(?<![A-Za-z0-9])sk-(?:(?:proj|svcacct|admin|ant-(?:api|admin)\d\d)-[A-Za-z0-9_-]{20,}"
        r"|(?=[A-Za-z0-9_-]{0,200}[0-9])[A-Za-z0-9_-]{20,})",
        "[API_KEY_REDACTED]",
    ),
    # A Fernet key: 32 bytes in URL-safe base64 (:func:`_random_key`: upper, lower and digits).
    ("fernet_key", r"(?<![A-Za-z0-9_=+/-])[A-Za-z0-9_-]{43}=(?![A-Za-z0-9_=+/-])", "[KEY_REDACTED]"),
    # scheme://user:PASSWORD@host: greedy up to the last @ before the path, so that an unencoded
    # @ (or # or ?) in the password does not leave its tail behind.
    # The same with an unencoded / in the password (mongodb+srv://app:a/b@cluster): the password
    # runs to an @ that a host name follows; a port (host:8080/path) is no password.
    (
        "url_password_slash",
        r"(?i)(?<![a-z0-9])([a-z][a-z0-9+.-]{1,20}://[^\s:/?#@\"'<>]+:)(?!\[)(?!\d{1,5}(?:[/?#]|$))"
        r"[^\s\"'<>@]{0,256}/[^\s\"'<>@]{0,256}(@)(?=[a-z0-9][a-z0-9.-]*(?:[:/?#\s\"'<>]|$))",
        r"\1[REDACTED]\2",
    ),
    (
        "url_password",
        r"(?i)(?<![a-z0-9])([a-z][a-z0-9+.-]{1,20}://[^\s:/?#@\"'<>]*:)(?!\[)[^\s/\"'<>]{1,256}(@)",
        r"\1[REDACTED]\2",
    ),
    (
        "authorization_header",
        r"(?P<head>(?<![A-Za-z0-9])(?i:(?:proxy-)?authorization)\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?[ \t]*"
        r"(?:(?i:bearer|basic|token|bot|digest|negotiate|ntlm|apikey|key)[ \t]+)?)"
        r"(?P<bare>(?!\[)[^\s\"'`\\,;]{6,4096})",
        "[REDACTED]",
    ),
    (
        "bearer_token",
        r"(?<![A-Za-z0-9])((?i:bearer)[ \t]+)(?!\[)(?=[A-Za-z0-9._~+/-]{0,4096}[0-9])[A-Za-z0-9._~+/-]{16,4096}=*",
        r"\1[REDACTED]",
    ),
    (
        "cookie_header",
        r"(?<![A-Za-z0-9])((?i:(?:set-)?cookie)[ \t]*:[ \t]*)(?=[^\s\"';=]{1,256}=)(?!\[)[^\r\n\"'`]{1,4096}",
        r"\1[REDACTED]",
    ),
    # Session cookies by their usual names (Django, PHP, Java, Express, Rails).
    (
        "session_cookie",
        r"(?i)(?<![A-Za-z0-9_])((?:sessionid|phpsessid|jsessionid|connect\.sid|[a-z]+_session|csrftoken|remember_token)"
        r"[\"']?[ \t]*[=:][ \t]*[\"']?)(?!\[)[A-Za-z0-9%._~+/-]{12,}",
        r"\1[REDACTED]",
    ),
    (
        "basic_auth_flag",
        r"(?<![A-Za-z0-9])((?:-u|--user)[ \t]+[\"']?[^\s:\"']{1,256}:)(?!\[)(?![0-9]+(?![^\s\"']))[^\s\"']{3,1024}",
        r"\1[REDACTED]",
    ),
    (
        "secret_flag",
        r"(?P<head>(?<![A-Za-z0-9])--(?:[A-Za-z0-9]+-)*"
        r"(?i:password|passwd|passphrase|pass|secret|token|api-key|apikey|access-key|secret-key|private-key"
        r"|client-secret)"
        r"(?:[ \t]+|=))(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A password given on a command line whose flag names no password: mysql -pX, docker login -p X,
    # sshpass -p X, redis-cli -a X, ldapsearch -w X, openssl -passin pass:X, keytool -storepass X,
    # zip -P X, 7z -pX, htpasswd -b FILE USER X, net user NAME X, net use \\\\host\\share /user:NAME X,
    # psexec ... -p X, gh secret set NAME --body X, aws ssm put-parameter ... --value X, aws
    # secretsmanager create-secret ... --secret-string X, az keyvault secret set ... --value X,
    # ConvertTo-SecureString 'X',
    # nmcli ... password X, wpa_passphrase SSID X, mongosh -p X, ssh-keygen -N X, openssl passwd X,
    # rabbitmqctl add_user NAME X, vault login X, smbclient -U user%X, xfreerdp /p:X.
    (
        "cli_password",
        r"(?P<head>(?<![A-Za-z0-9_])(?:(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump)\b"
        r"[^\n|;&]{0,512}?[ \t]-p(?=[^\s-])"
        r"|(?:docker|podman|nerdctl|buildah|skopeo|helm[ \t]+registry)[ \t]+login\b[^\n|;&]{0,512}?[ \t]-p[ \t]+"
        r"|sshpass\b[^\n|;&]{0,512}?[ \t]-p[ \t]*"
        r"|(?:redis-cli|valkey-cli|keydb-cli)\b[^\n|;&]{0,512}?[ \t]-a[ \t]+"
        r"|ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)\b[^\n|;&]{0,512}?[ \t]-w[ \t]+"
        r"|(?<![\w-])-pass(?:in|out)?[ \t]+pass:"
        r"|(?<![\w-])-(?:src|dest)?(?:store|key)pass[ \t]+"
        r"|(?:zip|unzip|zipcloak|funzip)\b[^\n|;&]{0,512}?[ \t]-P[ \t]+"
        r"|(?:7z|7za|7zr|7zz|rar|unrar)\b[^\n|;&]{0,512}?[ \t]-p(?=[^\s-])"
        r"|htpasswd\b(?=[^\n|;&]{0,512}?[ \t]-[A-Za-z]{0,8}b)[^\n|;&]{0,512}?[ \t](?=[^\s-]\S*[ \t]*(?:$|[\n|;&>]))"
        r"|net[ \t]+user[ \t]+(?:\"[^\"\n]+\"|[^\s/\"]+)[ \t]+(?=[^\s/*])"
        r"|net[ \t]+use[ \t]+(?:[A-Za-z]:[ \t]+)?\S+[ \t]+/user:\S+[ \t]+(?=[^\s/*])"
        r"|gh[ \t]+secret[ \t]+set\b[^\n|;&]{0,512}?[ \t](?:--body|-b)[ \t]*"
        r"|aws[ \t]+ssm[ \t]+put-parameter\b[^\n|;&]{0,512}?[ \t]--value[ \t]+"
        r"|aws[ \t]+secretsmanager[ \t]+(?:create-secret|put-secret-value|update-secret)\b[^\n|;&]{0,512}?"
        r"[ \t]--secret-string[ \t]+"
        r"|az[ \t]+keyvault[ \t]+secret[ \t]+set\b[^\n|;&]{0,512}?[ \t]--value[ \t]+"
        r"|(?:psexec|psexec64|paexec|winexe)\b[^\n|;&]{0,512}?[ \t]-p[ \t]+(?=\S*[\d!@#$%^&*+=?~A-Z])"
        r"|(?i:ConvertTo-SecureString)[ \t]+(?:-String[ \t]+)?"
        r"|nmcli\b[^\n|;&]{0,512}?[ \t](?:password|wifi-sec\.psk|802-1x\.password)[ \t]+"
        r"|wpa_passphrase[ \t]+(?:\"[^\"\n]*\"|\S+)[ \t]+"
        r"|(?:mongosh|mongo|mongodump|mongorestore|mongoexport|mongoimport|influx)\b[^\n|;&]{0,512}?[ \t]-p[ \t]+"
        r"|ssh-keygen\b[^\n|;&]{0,512}?[ \t]-[NP][ \t]+"
        r"|openssl[ \t]+passwd(?:[ \t]+-[\w-]+)*[ \t]+"
        r"|rabbitmqctl[ \t]+(?:add_user|change_password)[ \t]+\S+[ \t]+"
        r"|vault[ \t]+login[ \t]+(?=[^\s-])"
        r"|smbclient\b[^\n|;&]{0,512}?[ \t]-U[ \t]*[^\s%]+%"
        r"|(?:sqlcmd|osql|isql|bcp)\b[^\n|;&]{0,512}?[ \t]-P[ \t]*(?=[^\s-])"
        r"|az[ \t]+login\b[^\n|;&]{0,512}?[ \t](?:-p|--password)[ \t]+"
        r"|lftp\b[^\n|;&]{0,512}?[ \t]-u[ \t]+[^\s,]{1,64},"
        r"|sqlplus[ \t]+(?:-\w+[ \t]+)*[\w$#.-]{1,64}/(?=[^\s/@]{2})"
        r"|(?<![\w/:.-])/(?i:p|pass|password):))"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # More tools' passwords on their command lines (a rule of its own: the one above is read for
    # every text holding "pass"): schtasks ... /rp X, mosquitto_pub -P X, snmpwalk -c X (not public
    # or private), mc alias set NAME URL KEY X, rclone config create NAME TYPE secret_access_key X,
    # sshpass -f <(echo X), --vault-password-file <(echo X), security add-generic-password ... -w X,
    # jenkins-cli -auth user:X, bw unlock X, cargo login X, poetry config http-basic.NAME USER X,
    # poetry config pypi-token.NAME X.
    (
        "cli_password_tools",
        r"(?P<head>(?<![A-Za-z0-9_])(?:schtasks\b[^\n|;&]{0,512}?[ \t]/rp[ \t]+"
        r"|mosquitto_(?:pub|sub|rr)\b[^\n|;&]{0,512}?[ \t]-P[ \t]+"
        r"|snmp[a-z]{0,12}\b[^\n|;&]{0,512}?[ \t]-c[ \t]*(?!(?:public|private)\b)(?=[^\s-])"
        r"|mc[ \t]+alias[ \t]+set[ \t]+\S+[ \t]+\S+[ \t]+\S+[ \t]+"
        r"|rclone[ \t]+config[ \t]+(?:create|update)\b[^\n|;&]{0,512}?[ \t]"
        r"(?:secret_access_key|pass|password|client_secret|token|key|sas_url)[ \t]+"
        r"|(?:sshpass[ \t]+-f|--?(?:vault-password|password|passphrase|pass)[-_]?file)[ \t]*=?[ \t]*"
        r"<\([ \t]*(?:echo|printf)[ \t]+(?:-[a-zA-Z]+[ \t]+)*(?:'%s(?:\\n)?'[ \t]+|\"%s(?:\\n)?\"[ \t]+)?"
        r"|security[ \t]+add-(?:generic|internet)-password\b[^\n|;&]{0,512}?[ \t]-w[ \t]+"
        r"|(?<![\w-])-auth[ \t]+[^\s:@]{1,64}:(?=\S)|bw[ \t]+unlock[ \t]+(?=[^\s-])"
        r"|cargo[ \t]+login[ \t]+(?=[^\s-])|wandb[ \t]+login[ \t]+(?:--relogin[ \t]+)?(?=[^\s-])"
        r"|poetry[ \t]+config[ \t]+(?:http-basic\.\S+[ \t]+\S+|pypi-token\.\S+)[ \t]+))"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # SQL*Plus's "CONNECT user/X@db" and HTTPie's "http -a user:X" (a rule of their own: their words
    # are common, and the command-line rule's alternatives cost every text that holds one).
    (
        "connect_password",
        r"(?P<head>(?<!\w)(?:CONNECT|connect|CONN|conn)[ \t]+[\w$#.-]{1,64}/(?=[^\s/@]{2}[^\s/]*@)"
        r"|(?<![\w-])https?[ \t]+(?:[^\n|;&]{0,512}?[ \t])?(?:-a|--auth)[ \t]+[^\s:]{1,64}:)"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # SQL: CREATE/ALTER USER ... PASSWORD 'X', IDENTIFIED BY 'X', PASSWORD('X') (a quoted literal
    # only; "password 'password='X'" is an assignment's, left to the assignment rules).
    (
        "sql_password",
        r"(?P<head>(?<![\w-])(?i:PASSWORD[ \t]*\([ \t]*|PASSWORD[ \t]+"
        r"|IDENTIFIED[ \t]+(?:WITH[ \t]+\w+[ \t]+)?BY[ \t]+(?:PASSWORD[ \t]+)?)')"
        r"(?!\[REDACTED\]'|[\w.-]+[ \t]*[=:][ \t]*')(?=[^'\n]*[A-Za-z0-9])[^'\n]+'",
        "\\g<head>[REDACTED]'",
    ),
    # A quoted field named "pass", "pwd" or "pw" (JSON, YAML, TOML, a dict): {"pass": "X"}.
    (
        "short_password_field",
        r"(?P<head>(?P<kq>[\"'])(?i:pass|pwd|pw)(?P=kq)[ \t]*[:=][ \t]*(?P<q>[\"']))"
        r"(?!\[REDACTED\]|(?i:true|false|null|none|yes|no)?(?P=q)|[/~.]|[A-Za-z]:\\)[^\"'\n]{3,}(?=(?P=q))",
        "\\g<head>[REDACTED]",
    ),
    # "use X as the password" (X holding a digit or a symbol: "use this as the password" stays).
    (
        "password_named_after",
        r"(?P<head>(?<!\w)(?i:use|try)[ \t]+)(?!\[REDACTED\])(?=\S*[\d!@#$%^&*])\S+"
        r"(?=[ \t]+(?i:as)[ \t]+(?:(?i:the|my|a|our|your)[ \t]+)?(?:[\w-]+[ \t]+)?(?i:password|passphrase|pw)"
        r"(?:[ \t]+(?i:for|on|of|to|here|now|again)\b|[ \t]*(?:[^\w \t-]|$)))",
        "\\g<head>[REDACTED]",
    ),
    # A password or token piped to what reads one from its input: echo 'user:X' | chpasswd,
    # echo X | passwd --stdin, echo X | sudo -S, printf '%s' X | docker login --password-stdin,
    # echo X | gh auth login --with-token, echo X | kinit, echo X | vault login -.
    (
        "piped_password",
        r"(?P<head>(?<![A-Za-z0-9_])(?:echo[ \t]+(?:-[a-zA-Z]+[ \t]+)*"
        r"|printf[ \t]+(?:(?P<f>['\"])%s(?:\\n)?(?P=f)[ \t]+)?)"
        r"(?P<q>['\"]?)(?:[\w.-]+:)?)"
        r"(?!\[REDACTED\]|[$<]|(?i:test|hello|foo|bar|yes|no|y|n|xx*)(?=['\"\s|]))(?=[^\s'\"|]*[A-Za-z0-9])[^\s'\"|]{3,}"
        r"(?=(?P=q)[ \t]*\|[ \t]*(?:sudo[ \t]+)?(?:chpasswd|passwd\b[^\n|]*--stdin"
        r"|sudo[ \t]+(?:-[A-Za-z]*S\b|--stdin)"
        r"|(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|helm(?:[ \t]+registry)?)[ \t]+login\b"
        r"[^\n|]*--password-stdin"
        r"|gh[ \t]+auth[ \t]+login\b[^\n|]*--with-token|kinit\b|vault[ \t]+login\b|vncpasswd\b"
        r"|op[ \t]+signin\b|pass[ \t]+insert\b|keepassxc-cli\b|bw[ \t]+unlock\b"
        r"|gpg\b[^\n|]*--passphrase-fd[ \t]+0|cryptsetup\b|openssl\b[^\n|]*-pass(?:in)?[ \t]+stdin"
        r"|gcloud[ \t]+secrets[ \t]+(?:create|versions[ \t]+add)\b[^\n|]*--data-file[= ]-))",
        "\\g<head>[REDACTED]",
    ),
    # A password given by a here-string or a here-document to what reads one from its input
    # (sudo -S CMD <<< 'X', chpasswd <<< 'user:X', kinit bob <<< X, cryptsetup open DEV NAME <<< X,
    # gpg --passphrase-fd 0 ... <<< X, htpasswd -i FILE USER <<< X, passwd <<EOF / X / X / EOF,
    # smbpasswd -s -a bob <<EOF), written into a file named for secrets (cat > /etc/rsyncd.secrets
    # <<EOF / backup:X / EOF, echo 'backup:X' > /etc/rsyncd.secrets), or shown from one (cat
    # /etc/rsyncd.secrets, then its "user:X" lines): :func:`_redact_stdin`.
    (
        "stdin_password",
        rf"(?P<head>(?<!\w)(?:(?P<reader>{_STDIN_READERS})[^\n|;&<]{{0,512}}<<(?P<here><?)"
        r"|(?P<writer>(?:echo|printf)[ \t]+(?:-[a-zA-Z]+[ \t]+)*)"
        rf"(?=[^\n|;&]{{0,512}}>[ \t]*[^\s;&|]{{0,256}}{_SECRETS_FILE})"
        rf"|(?P<shown>(?:cat|less|more|head|tail|bat)[ \t]+(?:-[\w-]+[ \t]+)*)"
        rf"(?=[^\s|;&<>\\]{{0,256}}{_SECRETS_FILE}[^\s|;&<>\\]{{0,256}}[ \t]*(?:\r?\n|\\n|$))))",
        "[REDACTED]",
    ),
    # An expect script's answer to a password prompt: expect "Password:" then send "X\r" (its quotes
    # escaped too, as in a JSON string).
    (
        "expect_send",
        r"(?P<head>(?<!\w)expect[ \t]+(?:-\w+[ \t]+)*\\?[\"'{][^\n\"'}\\]*"
        r"(?i:pass|pin\b|secret|token|phrase|otp|verification)[^\n\"'}\\]*\\?[\"'}][ \t]*[{;]?[ \t]*"
        r"(?:(?:\r?\n|\\n)[ \t]*)?send[ \t]+(?:-[\w-]+[ \t]+)*\\?(?P<q>[\"'{]))(?![$\[])"
        r"(?P<v>(?:(?!\\[rn\"])[^\n\"'}]){2,1024})",
        "\\g<head>[REDACTED]",
    ),
    # The answer to an account's security question: "security question answer: X", "secret
    # answer: X", "the answer to my security question is X", "mother's maiden name is X".
    (
        "security_answer",
        r"(?P<head>(?<!\w)(?i:(?:security|secret|recovery)[ \t]+(?:question[ \t]+)?answer(?:[ \t]+(?:is|was))?"
        r"[ \t]*:?[ \t]*|answer[ \t]+to[ \t]+(?:my|the|our|his|her|their|your)[ \t]+security[ \t]+question"
        r"(?:[ \t]+(?:is|was))?[ \t]*:?[ \t]*|(?:mother|mom|mum)(?:'|\u2019)?s[ \t]+maiden[ \t]+name"
        r"(?:[ \t]+(?:is|was)[ \t]+|[ \t]*:[ \t]*)))"
        r"(?![\[(]|(?i:is|was|are|the|a|an|not|that|in|on|stored|saved|kept|written|required|needed|optional)\b)"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A service's directive whose value is its secret: redis "requirepass X" and "masterauth X",
    # keepalived "auth_pass X", bitcoind "rpcpassword X" (words of their own, anywhere in a text).
    (
        "config_directive",
        r"(?P<head>(?<![\w.])(?:requirepass|masterauth|auth_pass|rpcpassword)[ \t]+)"
        r"(?![=\s])(?!\[REDACTED\])(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A configuration's quoted secret: BIND's TSIG key 'secret "X";' (the ";" after the quote:
    # "secret" is a common word), ipsec.secrets ': PSK "X"'.
    (
        "config_secret_line",
        r"(?P<head>(?<![\w.-])(?:secret[ \t]+(?=\\?[\"'][^\n\"'\\]{1,1024}\\?[\"'][ \t]*;)|PSK[ \t]+(?=\\?[\"'])))"
        r"(?:" + _VALUE + r")",
        "[REDACTED]",
    ),
    # A BitLocker recovery key: eight groups of six digits; a product key: five groups of five
    # capitals and digits (BBBBB-CCCCC-DDDDD-EEEEE-FFFFF).
    (
        "key_shape",
        r"(?<![A-Za-z0-9])(?<![A-Za-z0-9]-)(?:\d{6}(?:-\d{6}){7}|[A-Z0-9]{5}(?:-[A-Z0-9]{5}){4})(?![A-Za-z0-9-])",
        "[REDACTED]",
    ),
    # A password's hash in crypt's format (/etc/shadow, .htpasswd): $apr1$, $1$, $5$, $6$, $y$, bcrypt's $2b$.
    (
        "password_hash",
        r"(?<![\w$])\$(?:apr1|1|5|6|y|gy|2[abxy]?)\$(?:rounds=\d+\$|\d{2}\$|[./\w]{1,16}\$)?(?:[./\w]{1,64}\$)?[./\w]{20,}",
        "[REDACTED]",
    ),
    # .netrc: "machine host login user password X", and its one-token-per-line form.
    (
        "netrc_password",
        r"(?P<head>(?<![\w-])(?:(?:machine|default)\b[^\n]{0,256}?[ \t]"
        r"|login[ \t]+\S{1,256}(?:[ \t]+|[ \t]*\r?\n[ \t]*))"
        r"password[ \t]+)(?:" + _VALUE + r")(?=[ \t]*(?:$|\n|\r|[ \t](?:machine|login|account|default|macdef)\b))",
        "[REDACTED]",
    ),
    # .pgpass lines: host:port:database:user:password.
    (
        "pgpass_line",
        r"(?m)^([ \t]*(?:[A-Za-z0-9._-]{1,256}|\*|\[[0-9A-Fa-f:]+\]):(?:\d{1,5}|\*):[^:\s]{1,256}:[^:\s]{1,256}:)"
        r"(?!\[)\S{3,}",
        r"\1[REDACTED]",
    ),
    # ODBC/ADO.NET connection strings: ...;Pwd=X; (Password=X is a password_pair).
    (
        "odbc_password",
        r"(?i)((?<=[;{])[ \t]*(?:pwd|pass)[ \t]*=[ \t]*)(?!\[)(?:\{[^}\n]{1,256}\}|[^;\s\"'\n]{1,256})",
        r"\1[REDACTED]",
    ),
    # <password>X</password>, <apiKey>X</apiKey>, <db.password>X</db.password>.
    (
        "xml_secret",
        rf"(<(?P<tag>[\w.:-]{{0,64}}?(?:{_SECRET_NAME}))(?:[ \t][^<>\n]{{0,256}})?>)"
        r"(?!\[)[^<\n]{3,4096}(</(?P=tag)[ \t]*>)",
        r"\1[REDACTED]\3",
    ),
    # YAML: a secret-named key with a block scalar (password: |) or a list (secrets:) under it.
    (
        "yaml_secret_block",
        rf"(?m)^(?P<indent>[ \t]*)(?P<key>[\w.-]{{0,64}}?(?:{_SECRET_NAME}|pass|pwd)s?)[ \t]*:[ \t]*"
        r"(?:[|>][+-]?\d?[ \t]*\r?\n(?P<block>(?:(?P=indent)[ \t]+\S[^\n]*(?:\n|$))+)"
        r"|\r?\n(?P<items>(?:(?P=indent)[ \t]*-[ \t]+[^\n]*(?:\n|$))+))",
        "[REDACTED]",
    ),
    # URL-encoded: password%3DX (and %22password%22%3A%22X).
    (
        "urlencoded_secret",
        rf"((?P<name>(?:{_SECRET_NAME}|(?:(?<=%2[26])|(?<=%3[Ff]))(?i:{_SECRET_WORDS}|pass|pwd)))(?:%22)?%3[DdAa](?:%22|%20)*)(?!%5B|%24|%7B|%3C)(?:%[0-9A-Fa-f]{{2}}|[A-Za-z0-9._~!*()+-]){{3,1024}}?"
        r"(?=%26|%22|%2C|&|[\s\"']|$)",
        r"\1[REDACTED]",
    ),
    # A quoted label and its value: "password:" "X", 'Password:', 'X' (an expect script's or a
    # prompt list's); a block after it ({ send ... }) is no value, nor a key after it ("type":).
    (
        "quoted_label",
        r"(?P<head>(?P<lq>[\"'`])(?i:pass(?:word|wd|phrase|code)|secret|token|api[ _-]?key|pin)[ \t]*:(?P=lq)[ \t]*"
        r"(?:,[ \t]*)?)(?![{(\[])(?:" + _VALUE + r")(?![ \t]*:)",
        "[REDACTED]",
    ),
    (
        "password_pair",
        rf"(?P<head>(?P<name>{_SECRET_NAME})(?P<sep>\\?[\"'`]?[ \t]*(?:=>|:=|=(?!=)|:(?![:=]|//)|\uff1a)[ \t]*))"
        rf"(?:{_VALUE})",
        "[REDACTED]",
    ),
    # A password written as prose, in any language: "das Passwort ist X", "пароль X", "密码 X",
    # "the password for the staging db is X", "my passphrase was X", "API key: X".
    (
        "spoken_password",
        rf"(?P<head>(?<!\w)(?:(?i:{_PASSWORD_WORDS}|{_SAID_PASSWORD_WORDS})[ \t]*"
        r"(?:(?i:is|es|ist|est|é|è|är|er|on|je|to|是)[ \t]+|[는은][ \t]*|[:\uff1a][ \t]*)?"
        r"|(?:(?i:pass(?:word|wd|phrase|code)|pwd?|(?:api|access|secret|private)[ \t]+key"
        rf"|(?:(?:{_CODE_PLACES})[ \t]+)?combination|(?:{_CODE_PLACES})[ \t]+code)|PIN)"
        + _SAID_IS
        + r"|(?i:(?:set|changed?|reset|updated?)[ \t]+(?:(?:the|my|our|his|her|their|your)[ \t]+)?(?:[\w-]+[ \t]+)?"
        r"pass(?:word|wd|phrase)[ \t]+to[ \t]+)"
        r"|(?i:(?:api|access|secret|private)[ \t]+key|pwd?|(?:door|gate|alarm|garage|keypad)[ \t]+code)[ \t]*:[ \t]*"
        r"|(?i:pass(?:wd)?)[ \t]*:[ \t]*(?=\S*[A-Za-z])"
        r"|(?i:pass)" + _SAID_IS + r"(?=\S*[A-Za-z])))"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A key or code said in prose: "the pre-shared key is X", "recovery key: X", "phone unlock code:
    # X", "SIM PIN is X", "license key: X", "the activation code is X" (a rule of its own: its words
    # would cost every text the password rule reads).
    (
        "spoken_key",
        r"(?P<head>(?<!\w)(?i:(?:pre-?shared|recovery|licen[cs]e|product|activation)[ \t]+key"
        r"|(?:unlock|screen|sim|phone)[ \t]+(?:code|pin)|(?:licen[cs]e|activation|registration)[ \t]+code)"
        r"(?:" + _SAID_IS + r"|[ \t]*:[ \t]*))(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A secret-named variable given its value in prose: "set DB_PASS to X", "change API_TOKEN to X".
    (
        "variable_set_to",
        rf"(?P<head>(?<![\w-])(?i:set|change[ds]?|reset|update[ds]?)[ \t]+\$?"
        rf"(?=[A-Za-z][\w.-]{{0,64}}[ \t])[\w.-]{{0,64}}?(?:{_SECRET_NAME})[ \t]+(?i:to)[ \t]+)"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A user and password after a login word: "login: admin / X", "credentials admin:X", "sign in
    # as alice / X", "WiFi: AcmeGuest / X", "VPN creds are deploy and X" (the password holding a
    # letter and a digit or symbol, 6 characters or more).
    (
        "login_pair",
        r"(?P<head>(?<![A-Za-z0-9])(?i:log(?:ged)?[ \t]?in|sign(?:ed)?[ \t]?in|credentials?|creds|(?P<net>wi-?fi|vpn))"
        r"(?:[ \t]+(?i:creds|credentials|login))?"
        r"(?:[ \t]+(?i:is|are|was|were|with|as|using))?[ \t]*:?[ \t]*"
        r"(?P<user>[\w.@+-]{1,64})(?:[ \t]*[/:][ \t]*|[ \t]+(?i:and|with(?:[ \t]+password)?)[ \t]+))"
        r"(?!\[REDACTED\]|/)(?P<pw>[^\s'\"]{6,128})",
        "[REDACTED]",
    ),
    # A password named without "is" or ":" before it: "# password Tr0ub4dor3xyz", "pwd Hunter2isBack":
    # a word of 8 characters or more holding a digit and both cases or a symbol, no "/" or "=" ("pwd
    # /srv/app", "password policy2024", "password reset3", "password PORT=8080" stay).
    (
        "bare_password",
        r"(?P<head>(?<![A-Za-z0-9_])(?i:password|passwd|passphrase|pwd)[ \t]+[\"']?)(?!\[REDACTED\])"
        r"(?=[^\s]*\d)(?=[^\s]*(?:[A-Z][^\s]*[a-z]|[a-z][^\s]*[A-Z]|[!@#$%^&*+?~]))(?![^\s]*[/=])"
        r"[^\s'\"`,;]{8,128}(?=[\s,;.'\"`)]|$)",
        "\\g<head>[REDACTED]",
    ),
    # A password in a URL's query ("?user=bob&pass=X", "&pwd=X") and after a user flag ("tool -u bob
    # -p X": a value of 6 characters or more with a letter and a digit, "-p 8080:80" is a port).
    (
        "query_password",
        r"(?P<head>[?&](?i:pass|pwd|pw|passwd)=)(?!\[REDACTED\]|(?i:true|false|yes|no|[01])(?:[&#\s]|$))[^&#\s]{3,256}",
        "\\g<head>[REDACTED]",
    ),
    (
        "user_then_p",
        r"(?P<head>(?<![\w-])-u[ \t]+[^\s-][^\s]{0,63}[ \t]+(?:-[A-Za-z][ \t]+[^\s-][^\s]{0,63}[ \t]+)?-p[ \t]*)"
        r"(?!\[REDACTED\])(?=[^\s'\"]*[A-Za-z])(?=[^\s'\"]*\d)[^\s'\"]{6,128}(?=\s|$)",
        "\\g<head>[REDACTED]",
    ),
    # A secret-named variable set by a keyword, its value after a space: fish "set -gx NAME X", csh
    # "setenv NAME X", a Dockerfile's "ENV NAME X", Apache's "SetEnv NAME X", a tool's configuration
    # ("npm config set //registry/:_authToken X", "yarn config set npmAuthToken X", "aws configure
    # set aws_secret_access_key X", "git config --global github.token X", 'dotnet user-secrets set
    # "Db:Password" "X"'); a secret-named string
    # given as a call's first argument and the value as its second ("os.environ.get('DB_PASSWORD',
    # 'X')", "define('DB_PASSWORD', 'X')", "getenv(\"API_KEY\", \"X\")"; a tuple "('AUTH', 'X')" is
    # data); a secret's setter ("setPassword(\"X\")", "set_api_key('X')"). Only under a secret's
    # name (:func:`is_secret_name`).
    (
        "keyword_assignment",
        r"(?P<head>(?<!\w)(?:set[ \t]+-[A-Za-z]{1,4}|setenv|ENV|SetEnv|setx"
        r"|(?:npm|pnpm|yarn|pip|gcloud)[ \t]+config[ \t]+set|aws[ \t]+configure[ \t]+set"
        r"|git[ \t]+config(?:[ \t]+--(?:global|local|system|replace-all|add))*|dotnet[ \t]+user-secrets[ \t]+set)[ \t]+"
        r"(?P<nq>(?:\\?\")?)(?P<name>[A-Za-z_/][\w.:/@-]{0,127})(?P=nq)[ \t]+)(?![=\s])(?!\[REDACTED\])"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    (
        "named_argument",
        r"(?P<head>(?:(?<=[\w.\]])\([ \t]*(?P<nq>[\"'])(?P<name>[\w.-]{1,128})(?P=nq)[ \t]*,"
        r"|(?:(?<=\.)|(?<![\w.]))set_?(?P<setter>[A-Za-z][\w]{0,64})\()[ \t]*)(?=[\"'])(?!.\[REDACTED\])"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A user and password given to an authentication object or tuple in code: "auth=('bob', 'X')",
    # "NetworkCredential(\"bob\", \"X\")", "HTTPBasicAuth('bob', 'X')", "usernamePassword('bob', 'X')".
    (
        "auth_pair",
        r"(?P<head>(?<![\w])(?:auth|basic_auth|credentials|(?:Network|UsernamePassword)Credentials?|HTTPBasicAuth"
        r"|BasicAuth|PasswordAuthentication|usernamePassword)[ \t]*(?:=[ \t]*\(?|\()[ \t]*"
        r"(?P<uq>[\"'])[^\"'\n]{1,64}(?P=uq)[ \t]*,[ \t]*(?P<pq>[\"']))(?!\[REDACTED\])[^\"'\n]{1,256}(?=(?P=pq))",
        "\\g<head>[REDACTED]",
    ),
    # A secret-named variable given its value on the next line (a Kubernetes or Compose env list:
    # "- name: DB_PASSWORD" then "value: X").
    (
        "named_value_below",
        rf"(?P<head>(?<![\w-])name:[ \t]*[\"']?(?P<name>(?=[\w.-]*(?i:{_SECRET_NAME}))[\w.-]{{1,128}})[\"']?[ \t]*\r?\n"
        r"[ \t]*value:[ \t]*)(?!\[REDACTED\])(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # A password in a protocol's own command, as a transcript or log shows it: redis "AUTH [user] X"
    # and FTP and POP3 "PASS X" at a line's start, IMAP "a1 LOGIN user X" anywhere, "ftp> user bob X",
    # mongo "db.auth('bob', 'X')".
    (
        "protocol_password",
        r"(?P<head>(?:(?:(?<=\n)|(?<=\\n)|^|(?<=[>\"'-]))[ \t]*(?:AUTH"
        r"(?:[ \t]+(?!PLAIN\b|LOGIN\b|XOAUTH2\b|CRAM-MD5\b)[\w.@-]{1,64}(?=[ \t]+\S))?|PASS)"
        r"|(?:(?<=[\s>\"'-])|^)\w{1,8}[ \t]+LOGIN[ \t]+\S{1,64}|(?<=ftp>)[ \t]*user[ \t]+\S{1,64})[ \t]+)"
        r"(?!\[REDACTED\]|PLAIN\b|LOGIN\b|XOAUTH2\b|CRAM-MD5\b)(?=[^\s\"'\\]*[\d!@#$%^&*+=?~])[^\s\"'\\]{4,256}"
        r"(?=\s|$|\\n|[\"'])"
        r"|(?P<call>(?<![\w.])db\.auth\([ \t]*(?P<uq>[\"'])[^\"'\n]{1,64}(?P=uq)[ \t]*,[ \t]*(?P<pq>[\"']))"
        r"(?!\[REDACTED\])[^\"'\n]{1,256}(?=(?P=pq))",
        "\\g<head>\\g<call>[REDACTED]",
    ),
    # Two-factor secrets: a TOTP seed after its name ("2FA seed JBSWY3DP…", base32: with a digit, or
    # in capitals), backup codes ("backup codes: 8f3k-2j9d 7h2k-9d3j", two or more, each with a
    # digit), an app password ("app password: abcd efgh ijkl mnop"), and a wallet's seed phrase (12
    # to 24 words, none of them a word of prose such as "the", "and", "is").
    (
        "otp_seed",
        r"(?P<head>(?<![A-Za-z0-9_])(?i:2fa|mfa|totp|otp|authenticator|two[ -]factor)[ \t]+"
        r"(?i:seed|secret|key|setup[ \t]+key)"
        r"(?:[ \t]+(?i:is|was))?[ \t]*[:=]?[ \t]*)(?=[A-Za-z2-7 ]{0,160}[2-7]|[A-Z2-7]{16})[A-Za-z2-7]{16,}"
        r"(?:[ \t][A-Za-z2-7]{4}){0,8}"
        r"(?![A-Za-z0-9])",
        "\\g<head>[REDACTED]",
    ),
    (
        "backup_codes",
        r"(?P<head>(?<![A-Za-z0-9_])(?i:backup|recovery|scratch|2fa|mfa)[ \t]+codes?"
        r"(?:[ \t]+(?i:are|were|is))?[ \t]*:?[ \t]*)"
        r"(?=[A-Za-z]*-?[A-Za-z]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,10})?"
        r"(?:[ \t]*[, \t][ \t]*(?=[A-Za-z]*-?[A-Za-z]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,10})?){1,19}(?![\w-])",
        "\\g<head>[REDACTED]",
    ),
    (
        "app_password",
        r"(?P<head>(?<![A-Za-z0-9_])(?i:app(?:lication)?[ \t-](?:specific[ \t-])?password)"
        r"(?:[ \t]+(?i:is|was))?[ \t]*:?[ \t]*)"
        r"(?:[a-z]{4}(?:[ \t][a-z]{4}){3}|[a-z]{16})(?![A-Za-z0-9])",
        "\\g<head>[REDACTED]",
    ),
    (
        "seed_phrase",
        r"(?P<head>(?<![A-Za-z0-9_])(?i:(?:seed|recovery|mnemonic|backup|wallet|secret[ \t]+recovery)[ \t]+"
        r"(?:phrase|words|mnemonic)|mnemonic)(?:[ \t]+(?i:is|was))?[ \t]*[:=]?[ \t]*)"
        rf"(?!(?:[a-z]{{3,8}}[ \t]+){{0,23}}(?:{_PROSE_WORDS})\b)"
        r"(?:[a-z]{3,8}[ \t]+){11,23}[a-z]{3,8}(?![A-Za-z])",
        "\\g<head>[REDACTED]",
    ),
    # A token or secret written as prose: "the session token is 8f7e6d5c4b3a", "my API token was
    # abc123|def456" (a value of letters and digits, 8 characters or more: :func:`_redact_spoken_token`).
    (
        "spoken_token",
        r"(?P<head>(?<![\w-])(?i:(?:(?:api|access|auth|session|bearer|refresh|secret|private|personal)[ \t]+)?"
        r"(?:token|secret)|(?:api|access|secret|private|encryption|license|wi-?fi|wpa2?|wlan|wireless|network"
        r"|recovery|activation|product|master|decryption|signing)[ \t]+key)" + _SAID_IS + r")"
        r"(?:" + _VALUE + ")",
        "[REDACTED]",
    ),
    # The entropy backstop: a long random word after a secret-sounding word or an assignment, or a
    # long random word of mixed case and digits anywhere (:func:`_redact_random`). A word may start
    # right after an "=" (NAME=<key>, whatever the name) and hold one (a key with "=" inside): the
    # name before such an "=" is judged apart from what follows it.
    (
        "random_token",
        r"(?<![A-Za-z0-9+/_.~-])[A-Za-z0-9+/_.~-]{16,}(?:=+[A-Za-z0-9+/_.~-]+)*={0,2}(?![A-Za-z0-9+/=_.~-])",
        "[REDACTED]",
    ),
    # A card's security code, a social security number, a bank account's or routing number and a
    # passport's number, after their names ("CVV 123", "SSN: 078-05-1120", "account number
    # 123456789012", "passport no. X1234567"); an IBAN whose check digits hold (_iban_valid) in a
    # text that speaks of banks or payments.
    (
        "personal_number",
        r"(?P<head>(?<!\w)(?i:(?:cvv2?|cvc2?|card[ \t]+security[ \t]+code)(?P<short>)"
        r"|(?:ssn|social[ \t]+security(?:[ \t]+(?:number|no\.?|#))?)"
        r"|(?:bank[ \t]+)?(?:account|acct)[ \t]+(?:number|no\.?|#)|routing[ \t]+(?:number|no\.?|#)|aba|sort[ \t]+code"
        r"|passport[ \t]+(?:number|no\.?|#))"
        r"(?:[ \t]+(?:is|was))?[ \t]*[:#=]?[ \t]*)"
        r"(?P<v>(?(short)\d{3,4}|[A-Z]{0,2}\d(?:[ -]?\d){4,16}[A-Z]?))(?![\w-])",
        "\\g<head>[REDACTED]",
    ),
    # (An IBAN before a card: a run of its digits can pass Luhn's check.)
    (
        "iban",
        r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?(?![A-Za-z0-9])",
        "[IBAN_REDACTED]",
    ),
    # A card's number, not inside a longer token (a hex digest): bounded by non-alphanumerics; glued
    # to a dash or an underscore (a part of an id such as build-20231026123456), only 15 or 16 digits
    # (_redact_cards).
    ("credit_card", r"(?<![A-Za-z0-9])(?:\d[ -]?){12,18}\d(?![A-Za-z0-9])", "[CARD_REDACTED]"),
    ("email", r"\b(?!git@)[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", "[EMAIL_REDACTED]"),
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


class _Text:
    """A text and, computed once on first need, its lower-case form (for the prechecks)."""

    __slots__ = ("_lower", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lower: str | None = None

    @property
    def lower(self) -> str:
        if self._lower is None:
            self._lower = self.text.lower()
        return self._lower


def _any(text: str, parts: tuple[str, ...]) -> bool:
    """Whether ``text`` holds any of ``parts`` (a loop: a generator cost every precheck ~0.5 us)."""
    for part in parts:  # noqa: SIM110 - any() over a generator: see the docstring
        if part in text:
            return True
    return False


_DIGIT = re.compile(r"\d")


def _digits_at_least(text: str, n: int) -> bool:
    """Whether ``text`` holds ``n`` digits (``\\d``: a card's), counted by the regex engine (a
    character loop in Python cost 0.3 s on a pasted log of 6 MB)."""
    return any(found >= n for found, _ in enumerate(_DIGIT.finditer(text), 1))


_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ABIA", "ACCA", "ANPA", "ANVA", "AIPA")
_PAIR_HINTS = ("pass", "pw", "secret", "token", "key", "credential", "auth", "psk")
_FOREIGN_PASSWORDS: tuple[str, ...] = ("contrase", "kennwort", "пароль", "密码", "口令", "mot de passe", "senha")
_FOREIGN_PASSWORDS += ("wachtwoord", "hasło", "parola", "パスワード", "비밀번호", "şifre", "lösenord", "mdp", "clave")
_FOREIGN_PASSWORDS += ("heslo", "jelszó", "salasana", "adgangskode", "passord")
_SPOKEN_HINTS: tuple[str, ...] = ("pass", "pw", "pin", "api key", "access key", "secret key", "private key")
_SPOKEN_HINTS += (" code", "combination")
_KEY_HINTS = (" key", " code", " pin")
_TOKEN_HINTS = ("token", "secret", " key")
_FILE_HINTS = ("secret", "password", "htpasswd", "credential", "passfile", ".pass")
_VENDOR_HINTS: tuple[str, ...] = ("glpat-", "npm_", "pypi-", "dop_v1_", "shp", "SG.", "sbp_", "pplx-", "fw_")
_VENDOR_HINTS += ("lsv2_", "glrt-", "Q~")
_PERSONAL_HINTS: tuple[str, ...] = ("cvv", "cvc", "security code", "ssn", "social security", "account n", "account #")
_PERSONAL_HINTS += ("acct", "routing", "aba ", "sort code", "passport")
# Words near an IBAN (in English, German, French, Italian, Spanish).
_IBAN_HINTS: tuple[str, ...] = ("iban", "bic ", "bic:", "swift", "wire ", "bank", "payment", "pay to", "invoice")
_IBAN_HINTS += ("überweis", "virement", "bonifico", "transferencia", "konto", "compte ", "conto ", "cuenta")
_FILE_COMMANDS = ("cat ", "tee ", "echo ", "printf ", "less ", "more ", "head ", "tail ", "bat ")
_KEYWORD_SETTERS: tuple[str, ...] = ("set -", "setenv", "ENV ", "SetEnv", "setx", "config set", "configure set")
_KEYWORD_SETTERS += ("git config", "user-secrets")
_CLI_HINTS: tuple[str, ...] = ("mysql", "mariadb", "login", "sshpass", "-cli", "ldap", "pass", "zip", "7z", "rar")
_CLI_HINTS += ("net user", "securestring", "nmcli", "mongo", "influx", "ssh-keygen", "rabbitmqctl", "smbclient")
_CLI_HINTS += ("net use", "psexec", "paexec", "winexe", "gh secret", "ssm", "secretsmanager", "keyvault")
_TOOL_HINTS: tuple[str, ...] = ("schtasks", "mosquitto", "snmp", "mc alias", "rclone", "<(", "-auth", "bw unlock")
_TOOL_HINTS += ("cargo login", "poetry config", "-password", "wandb login")
_CLI_HINTS += ("vault", "/p:", "sqlcmd", "osql", "isql", "bcp", "az login", "lftp", "sqlplus")
_COOKIE_HINTS = ("session", "sessid", "connect.sid", "csrftoken", "remember_token")

#: Cheap substring tests: a built-in rule is compiled and run only when its test passes, since
#: compiling every pattern costs a hook process more than the rest of its work.
_PRECHECKS: dict[str, Callable[[_Text], bool]] = {
    "pem_private_key": lambda t: "PRIVATE KEY" in t.text,
    "pem_private_key_tail": lambda t: "-----END " in t.text,
    "private_block": lambda t: "<private>" in t.text,
    "jwt": lambda t: "eyJ" in t.text,
    "aws_access_key": lambda t: _any(t.text, _AWS_PREFIXES),
    "github_token": lambda t: "_" in t.text and ("gh" in t.text or "github_pat_" in t.text),
    "slack_token": lambda t: _any(t.text, ("xox", "xapp-", "hooks.slack.com")),
    "stripe_key": lambda t: _any(t.text, ("k_live_", "k_test_", "whsec_")),
    "google_api_key": lambda t: _any(t.text, ("AIza", "ya29.")),
    "huggingface_token": lambda t: "hf_" in t.text,
    "vendor_token": lambda t: _any(t.text, _VENDOR_HINTS),
    "api_key": lambda t: "sk-" in t.text,
    "fernet_key": lambda t: "=" in t.text,
    "putty_private_key": lambda t: "Private-" in t.text,
    "key_lines": lambda t: "\n" in t.text and len(t.text) >= 80,
    "encoded_private_key": lambda t: "LS0tLS1CRUdJTi" in t.text,
    "service_token": lambda t: len(t.text) >= 30,
    "url_password_slash": lambda t: "://" in t.text and "@" in t.text,
    "session_cookie": lambda t: _any(t.lower, _COOKIE_HINTS),
    "cli_password": lambda t: _any(t.lower, _CLI_HINTS),
    "cli_password_tools": lambda t: _any(t.lower, _TOOL_HINTS),
    "sql_password": lambda t: "'" in t.text and ("password" in t.lower or "identified" in t.lower),
    "piped_password": lambda t: ("echo" in t.text or "printf" in t.text) and "|" in t.text,
    "short_password_field": lambda t: _any(t.lower, ('"pass"', "'pass'", '"pw', "'pw")),
    "password_named_after": lambda t: " as " in t.text and _any(t.lower, ("password", "passphrase", " pw")),
    "netrc_password": lambda t: "password" in t.lower,
    "stdin_password": lambda t: "<<" in t.text or (_any(t.lower, _FILE_HINTS) and _any(t.text, _FILE_COMMANDS)),
    "expect_send": lambda t: "expect" in t.text and "send" in t.text,
    "config_directive": lambda t: _any(t.lower, ("requirepass", "masterauth", "auth_pass", "rpcpassword")),
    "config_secret_line": lambda t: ("secret" in t.text or "PSK" in t.text) and ('"' in t.text or "'" in t.text),
    "key_shape": lambda t: t.text.count("-") >= 4,
    "personal_number": lambda t: _any(t.lower, _PERSONAL_HINTS),
    "iban": lambda t: _any(t.lower, _IBAN_HINTS),
    "password_hash": lambda t: "$" in t.text,
    "quoted_label": lambda t: ':"' in t.text or ":'" in t.text or ":`" in t.text,
    "security_answer": lambda t: "answer" in t.lower or "maiden" in t.lower,
    "pgpass_line": lambda t: t.text.count(":") >= 4,
    "odbc_password": lambda t: ";" in t.text and ("pwd" in t.lower or "pass" in t.lower),
    "xml_secret": lambda t: "</" in t.text and (_any(t.lower, _PAIR_HINTS) or _any(t.lower, _FOREIGN_PASSWORDS)),
    "yaml_secret_block": lambda t: ":" in t.text and "\n" in t.text and _any(t.lower, _PAIR_HINTS),
    "urlencoded_secret": lambda t: "%3" in t.text,
    "spoken_password": lambda t: _any(t.lower, _SPOKEN_HINTS) or _any(t.lower, _FOREIGN_PASSWORDS),
    "spoken_token": lambda t: _any(t.lower, _TOKEN_HINTS),
    "spoken_key": lambda t: _any(t.lower, _KEY_HINTS),
    "variable_set_to": lambda t: (
        " to " in t.lower and _any(t.lower, ("set", "chang", "updat")) and _any(t.lower, _PAIR_HINTS)
    ),
    "bare_password": lambda t: _any(t.lower, ("password ", "passwd ", "passphrase ", "pwd ")),
    "query_password": lambda t: _any(t.lower, ("pass=", "pwd=", "pw=", "passwd=")),
    "user_then_p": lambda t: "-u " in t.text and "-p" in t.text,
    "connect_password": lambda t: (
        ("conn" in t.lower and "/" in t.text and "@" in t.text)
        or ("http" in t.text and ("-a " in t.text or "--auth" in t.text))
    ),
    "keyword_assignment": lambda t: _any(t.text, _KEYWORD_SETTERS),
    "named_argument": lambda t: "(" in t.text and _any(t.lower, _PAIR_HINTS),
    "auth_pair": lambda t: "(" in t.text and _any(t.text, ("auth", "Auth", "redential", "usernamePassword")),
    "named_value_below": lambda t: "value:" in t.text and "name:" in t.text,
    "protocol_password": lambda t: _any(t.text, ("AUTH ", "PASS ", "LOGIN ", "ftp>", "db.auth(")),
    "otp_seed": lambda t: _any(
        t.lower, ("2fa ", "mfa ", "totp ", "otp ", "authenticator ", "two-factor", "two factor")
    ),
    "backup_codes": lambda t: " code" in t.lower and _any(t.lower, ("backup", "recovery", "scratch", "2fa", "mfa")),
    "app_password": lambda t: "password" in t.lower and "app" in t.lower,
    "seed_phrase": lambda t: _any(t.lower, ("phrase", "mnemonic", "seed words", "recovery words", "backup words")),
    "login_pair": lambda t: (
        _any(t.lower, ("log", "sign", "cred", "wifi", "wi-fi", "vpn"))
        and ("/" in t.text or ":" in t.text or " and " in t.lower)
    ),
    "random_token": lambda t: len(t.text) >= 16,
    "url_password": lambda t: "://" in t.text and "@" in t.text,
    "authorization_header": lambda t: "authorization" in t.lower,
    "bearer_token": lambda t: "bearer" in t.lower,
    "cookie_header": lambda t: "cookie" in t.lower,
    "basic_auth_flag": lambda t: "-u " in t.text or "--user" in t.text,
    "secret_flag": lambda t: "--" in t.text and _any(t.lower, _PAIR_HINTS),
    "password_pair": lambda t: _any(t.lower, _PAIR_HINTS) or _any(t.lower, _FOREIGN_PASSWORDS),
    "credit_card": lambda t: _digits_at_least(t.text, 13),
    "email": lambda t: "@" in t.text,
}

# -- values that are not secrets: placeholders, literals, code ----------------------------------

_LITERALS = frozenset(
    (
        *("true", "false", "null", "none", "nil", "undefined", "yes", "no", "on", "off", "required", "optional"),
        *("str", "string", "int", "bool", "bytes", "any", "object", "secret", "password", "token", "redacted"),
        *("hidden", "masked", "empty"),
    )
)
_MASK_CHARS = frozenset("*xX.•…-_#?")
# Patterns used by code, kept as text: ``re`` compiles and caches them on first use, so that a
# hook process that never needs them never compiles them.
# A call ends at its closing bracket (or where a quote cut the value): ``Sup3r(S3cret)!`` is none.
_CODE = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z_][\w.]*(?:\[.*|\((?:[\w.(), =*]*\))?(?:\.[\w.()]*)?)"
_IDENTIFIER = r"[A-Za-z_]\w*"
_CALL_CUT = r"[A-Za-z_][\w.]*\([^()]*"


def _placeholder(value: str) -> bool:
    """``value`` (an assignment's value, quotes removed) holds no secret: too short, a literal, a
    template or environment reference, a mask, or an already redacted text."""
    if len(value) < 3 or value.rstrip(".!?:").lower() in _LITERALS:
        return True
    if value.startswith("[") and "REDACTED" in value:
        return True
    return value[0] in "$%{<" or set(value) <= _MASK_CHARS


def _keyish(part: str) -> bool:
    """Whether ``part`` (of a dotted value) is a key rather than a name: 16 characters or more of
    both cases and digits that do not read as an identifier."""
    return len(part) >= 16 and _mixed(part) and not _identifier(part)


def _keep_assignment(match: re.Match[str]) -> bool:
    """Whether an assignment found by ``password_pair``/``secret_flag`` names no secret (see the
    module docstring)."""
    quoted = match.group("quoted")
    if quoted is None:
        quoted = match.group("equoted")
    value = quoted if quoted is not None else match.group("bare")
    if _placeholder(value):
        return True
    if quoted is not None:
        # A quoted label ("password:", as expect or a prompt list writes it): its closing quote
        # opened no value (``quoted_label`` takes what follows it).
        quote = match.group("q")
        head = match.group("head")
        before = match.string[match.start() - 1 : match.start()]
        return bool(quote) and head.endswith(":") and quote not in head and before == quote
    if value.startswith("--"):
        return True  # --no-password --verbose: the next flag, not a value
    if re.fullmatch(_CODE, value) and not any(_keyish(part) for part in value.split(".")):
        return True  # os.environ["X"], getpass(), self.password (not s.<key> nor dp.st.prd.<key>)
    after = match.string[match.end("bare") : match.end("bare") + 1]
    if after and after in "\"'`," and re.fullmatch(_CALL_CUT, value):
        return True  # partition(b':'), getpass(prompt, stream): a call whose argument cut the value
    groups = match.groupdict()
    sep, name = groups.get("sep"), groups.get("name")
    if sep is None or name is None:
        return False
    if re.fullmatch(_IDENTIFIER, value) and (("=" in sep and " " in sep and "_" in value) or sep[:1] in "\"'`"):
        return True  # password = user_password, {"X-Api-Key": api_key}: code (JSON has no bare words)
    if ":" in sep and '"' not in sep and "'" not in sep and "=" not in sep:
        # "Password: required", "the token: see below": a bare word as prose, not a config key.
        start = match.start("name")
        before = match.string[start - 1] if start else " "
        bare_word = (before.isspace() or before in "(*>") and (name.islower() or name.istitle())
        word = value.rstrip(".!?:")
        if bare_word and word.isalpha() and len(word) < 12:
            return True
    return False


def _value_replaced(match: re.Match[str], replacement: str) -> str:
    """A ``_VALUE`` match (after its ``head``) with ``replacement`` for its value, inside its quotes."""
    quote = match.group("q") or match.group("eq")
    if quote is not None:
        return f"{match.group('head')}{quote}{replacement}{quote}"
    return f"{match.group('head')}{replacement}"


def _redact_named(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """A value under a secret's name only (``DB_PASSWORD``, not ``TOKEN_TTL``: :func:`is_secret_name`):
    the name of the group ``name``, else of ``setter`` (a setter's, ``setPassword('X')``)."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        groups = match.groupdict()
        if not is_secret_name(groups.get("name") or groups.get("setter") or "") or _keep_assignment(match):
            return match.group(0)
        hits += 1
        return _value_replaced(match, replacement)

    return pattern.sub(sub, text), hits


def _redact_assignments(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        if _keep_assignment(match):
            return match.group(0)
        hits += 1
        return _value_replaced(match, replacement)

    return pattern.sub(sub, text), hits


def _redact_header(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        value = match.group("bare")
        if _placeholder(value) or (value.isalpha() and len(value) < 12):
            return match.group(0)  # "Authorization: required", "authorization: optional"
        hits += 1
        return f"{match.group('head')}{replacement}"

    return pattern.sub(sub, text), hits


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _in_uuid(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` lies inside a UUID (``8-4-4-4-12`` hex digits)."""
    for match in _UUID.finditer(text, max(0, start - 36), min(len(text), end + 36)):
        if match.start() <= start and end <= match.end():
            return True
    return False


def _is_card(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (digits with single spaces or dashes) is a card number."""
    raw = text[start:end]
    if _in_uuid(text, start, end):
        return False  # a UUID whose first groups happen to be digits (8-4-4: no card is grouped so)
    digits = re.sub(r"\D", "", raw)
    bare = raw.isdigit()
    if bare and raw[0] == "1" and len(raw) in (13, 16, 19):
        return False  # an epoch time in ms, µs or ns, not a card (no 16-digit card starts with 1)
    glued = text[start - 1 : start] in ("-", "_") or text[end : end + 1] in ("-", "_")  # a part of an id?
    return (15 if glued else 13) <= len(digits) <= (16 if glued else 19) and (
        _luhn(digits) or (bare and len(digits) == 16)
    )


def _redact_cards(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """Cards as :data:`DEFAULT_REDACTIONS` says. A run that is no card as a whole may end with one
    after a shorter number ("2 4539 5787 6362 1486", "v1-4539578763621486"): its last 13-19 digits
    in groups of 4 (or 4-6-5), or its last group of 13-19 digits, are checked too."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        start, end = match.span()
        if _is_card(text, start, end):
            hits += 1
            return replacement
        raw = match.group(0)
        groups = [m.span() for m in re.finditer(r"\d+", raw)]
        for k in range(1, len(groups)):  # the longest tail first
            tail = [b - a for a, b in groups[k:]]
            grouped = all(n == 4 for n in tail[:-1]) or tail == [4, 6, 5]  # 4-4-4-4(-3), Amex 4-6-5
            if 13 <= sum(tail) <= 19 and (grouped or len(tail) == 1) and _is_card(text, start + groups[k][0], end):
                hits += 1
                return raw[: groups[k][0]] + replacement
        return match.group(0)

    return pattern.sub(sub, text), hits


def _iban_valid(candidate: str) -> bool:
    """ISO 13616's check: the country and check digits moved to the end, letters as 10-35, the
    number modulo 97 is 1."""
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _redact_where(secret: Callable[[str], bool]) -> Callable[[re.Pattern[str], str, str], tuple[str, int]]:
    """A substitute that replaces a match only where ``secret(its text)`` holds; the rest is kept."""

    def substitute(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
        hits = 0

        def sub(match: re.Match[str]) -> str:
            nonlocal hits
            if not secret(match.group(0)):
                return match.group(0)
            hits += 1
            return match.expand(replacement)

        return pattern.sub(sub, text), hits

    return substitute


def _random_key(word: str) -> bool:
    """A Fernet-shaped word that is a key: of mixed case and digits, or cased and no identifier (43
    random characters may hold no digit)."""
    word = word.rstrip("=")
    cased = any(c.isupper() for c in word) and any(c.islower() for c in word)
    return _mixed(word) or (cased and not _identifier(word))


def _pgpass_secret(line: str) -> bool:
    """A pgpass line, not a MAC address or a time (every field two hex digits or fewer)."""
    fields = line.strip().split(":")
    return not all(len(f) <= 2 and all(c in "0123456789abcdefABCDEF" for c in f) for f in fields)


def _redact_pem_tails(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """Replace an orphan ``-----END … PRIVATE KEY-----`` and the key lines before it: walking back
    word by word over base64 words (the last one of any length, the others 16 characters or more),
    which stops at the first word of prose."""
    word, key_line = re.compile(r"\S+"), re.compile(r"[A-Za-z0-9+/=]+")  # from re's cache after the first call
    out: list[str] = []
    hits, kept_to = 0, 0
    for match in pattern.finditer(text):
        words = [m.span() for m in word.finditer(text, kept_to, match.start())]
        i = len(words)
        while (
            i
            and key_line.fullmatch(text, *words[i - 1])
            and (i == len(words) or words[i - 1][1] - words[i - 1][0] >= 16)
        ):
            i -= 1
        cut = words[i][0] if i < len(words) else match.start()
        out += (text[kept_to:cut], replacement)
        kept_to = match.end()
        hits += 1
    out.append(text[kept_to:])
    return "".join(out), hits


def _redact_loose(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """An assignment found in prose ("das Passwort ist falsch", a line "password reset"): a bare word
    of letters only, shorter than 12, is a word, not a password."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        bare = match.group("bare")
        if bare is not None and not any(c.isdigit() for c in bare) and len(bare) < 12:
            return match.group(0)
        if _keep_assignment(match):
            return match.group(0)
        hits += 1
        return _value_replaced(match, replacement)

    return pattern.sub(sub, text), hits


def _redact_spoken_token(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """A token or secret named in prose: only a value of 8 characters or more holding a letter and a
    digit ("the token is 4096 long", "the secret is consistency", "the API key is in vault/prod" are
    no secrets)."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        value = match.group("quoted") or match.group("equoted") or match.group("bare") or ""
        word = value.rstrip(".!?:")
        if len(word) < 8 or not any(c.isdigit() for c in word) or not any(c.isalpha() for c in word):
            return match.group(0)
        if _placeholder(value) or re.fullmatch(_CODE, word):
            return match.group(0)
        hits += 1
        return _value_replaced(match, replacement)

    return pattern.sub(sub, text), hits


#: What makes a login pair's password more than a word: a digit or one of these.
_PASSWORD_SYMBOLS = frozenset("!@#$%^&*+=?~")


def _redact_login_pair(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """A user and password after a login word: only a password of 6 characters or more holding a
    letter and a digit or symbol ("login: user/settings page", "sign in with Google/GitHub",
    "credentials admin:read-only", "log in to host:2222" are no passwords); after "wifi" or "vpn",
    of both cases and a digit, or a symbol ("wifi: 5GHz / channel36" is a setting). A full stop, comma,
    colon or bracket that ends it stays (a "!" or "?" may be the password's)."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        value = match.group("pw")
        word = value.rstrip(".,;:)")
        word = word if len(word) >= 6 else value
        letter = any(c.isalpha() for c in word)
        if len(word) < 6 or not letter or not any(c.isdigit() or c in _PASSWORD_SYMBOLS for c in word):
            return match.group(0)
        if match.group("net") and not (_mixed(word) or any(c in _PASSWORD_SYMBOLS for c in word)):
            return match.group(0)  # a network's name and a setting ("wifi: 5GHz / channel36")
        if _placeholder(word):
            return match.group(0)
        hits += 1
        return match.group("head") + replacement + value[len(word) :]

    return pattern.sub(sub, text), hits


def _mixed(word: str) -> bool:
    """Upper case, lower case and digits: the alphabet of a random key, not of a word or a hash."""
    return any(c.isupper() for c in word) and any(c.islower() for c in word) and any(c.isdigit() for c in word)


def _redact_encoded_key(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """A base64 word that decodes to a PEM private key (a certificate is kept)."""
    import binascii

    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        head = match.group(0)[:64]
        try:
            decoded = binascii.a2b_base64(head[: len(head) // 4 * 4])
        except (binascii.Error, ValueError):
            decoded = b"PRIVATE"  # not base64 after all: redact (the word begins as a key would)
        if b"PRIVATE" not in decoded and b"PRIVAT" not in decoded[-8:] and len(decoded) >= 40:
            return match.group(0)
        hits += 1
        return replacement

    return pattern.sub(sub, text), hits


_KEY_CORE = r"[A-Za-z0-9+/]{40,}={0,2}"
_KEY_TAIL = r"(?:[ \t]*\d{1,6}(?:\t|:| {1,2})|[\w./~-]{1,256}:\d{1,6}:)?[ \t]*([A-Za-z0-9+/]{2,}={0,2})(?=\s|$)"


def _redact_key_lines(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """Runs of two or more lines of key material (:data:`DEFAULT_REDACTIONS` ``key_lines``) and the
    shorter last line of the key right after a run: the base64 word of each replaced, a line number
    before it kept."""
    lines = [m for m in pattern.finditer(text) if _mixed(m.group(0))]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        j = i
        while (
            j + 1 < len(lines)
            and text.count("\n", lines[j].end(), lines[j + 1].start()) == 1
            and (text[lines[j].end() : lines[j + 1].start()].strip() == "")
        ):
            j += 1
        if j > i:
            for m in lines[i : j + 1]:
                core = re.search(_KEY_CORE, m.group(0))
                if core is not None:
                    spans.append((m.start() + core.start(), m.start() + core.end()))
            end = lines[j].end()
            nxt = text.find("\n", end)
            if nxt != -1:
                stop = text.find("\n", nxt + 1)
                tail = re.match(_KEY_TAIL, text[nxt + 1 : len(text) if stop == -1 else stop])
                if tail is not None:
                    spans.append((nxt + 1 + tail.start(1), nxt + 1 + tail.end(1)))
        i = j + 1
    if not spans:
        return text, 0
    out: list[str] = []
    kept = 0
    for a, b in spans:
        out += (text[kept:a], replacement)
        kept = b
    out.append(text[kept:])
    return "".join(out), len(spans)


_HEREDOC_TAG = re.compile(r"-?[ \t]*(?P<q>['\"]?)(?P<tag>[A-Za-z_][\w.-]*)(?P=q)")
_USER_LINE = re.compile(r"[ \t]*[\w.@-]+:(?P<v>[^\s:\\]+)[ \t]*\r?")
_LINE_BREAK = re.compile(r"\n")
#: The lines of a here-document (or of a secrets file shown) read at most: a password's are few, and
#: a text of many heads without their ends must not be read again from each.
_HEREDOC_LINES_MAX = 64
_HEREDOC_LINE_CHARS = 4096
_ESCAPED_BREAK = re.compile(r"(?:\\r)?\\n|\n")


def _redact_stdin(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """``stdin_password``: after a reader's ``<<<``, its value; after its ``<<TAG``, each line up to
    TAG; after an echo into a secrets file, its value; after a secrets file shown, each following
    "user:password" line. Of "user:password" lines (chpasswd's, a secrets file's) the user is
    kept; a variable (``$PASSWORD``) is kept."""
    out: list[str] = []
    hits = 0
    pos = 0

    def replace(start: int, end: int, users: bool) -> None:
        """Replace ``text[start:end]`` (after its "user:" where ``users``), unless a placeholder."""
        nonlocal pos, hits
        if users and ":" in text[start:end]:
            start = text.index(":", start, end) + 1
        if not _placeholder(text[start:end]):
            out.append(text[pos:start] + replacement)
            pos, hits = end, hits + 1

    def value_at(i: int, users: bool) -> None:
        """Replace the word (quoted or bare) at ``i``."""
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] in "'\"":
            line_end = text.find("\n", i, i + 1026)
            line_end = min(len(text), i + 1026) if line_end == -1 else line_end
            end = text.find(text[i], i + 1, line_end)
            start, end = i + 1, line_end if end == -1 else end  # unclosed: the rest of its line
        else:
            start, end = i, i
            while end < len(text) and not text[end].isspace() and text[end] not in "|;&><":
                end += 1
        if end <= start:
            return
        if text.endswith("\\n", start, end):
            end -= 2
        replace(start, end, users)

    def lines_from(i: int, users: bool, until: str | None, first: bool = False) -> None:
        """Replace each line from the one after ``i``: up to the line ``until`` (a here-document;
        its ``first`` line only, when the rest is a command's input), or while lines read
        "user:password" (a file shown). In a JSON string, lines end at ``\\n`` and the text at
        its closing quote."""
        newline, escaped_newline = text.find("\n", i, i + 4096), text.find("\\n", i, i + 4096)
        escaped = newline == -1 or -1 < escaped_newline < newline
        breaks = _ESCAPED_BREAK if escaped else _LINE_BREAK
        found_break = breaks.search(text, i, i + 256)  # the end of the head's line
        for _ in range(_HEREDOC_LINES_MAX):
            if found_break is None:
                return
            line_start = found_break.end()
            found_break = breaks.search(text, line_start, line_start + _HEREDOC_LINE_CHARS)
            line_end = min(len(text), line_start + _HEREDOC_LINE_CHARS) if found_break is None else found_break.start()
            line = text[line_start:line_end]
            if escaped and '"' in line:  # the string ends on this line
                line = line[: line.index('"')]
                found_break = None
            if until is not None and line.strip() in (until, until + "\\"):
                return
            if until is None:
                user_line = _USER_LINE.fullmatch(line)
                if user_line is None:
                    return
                start, end = line_start + user_line.start("v"), line_start + user_line.end("v")
            else:
                start, end = line_start + len(line) - len(line.lstrip()), line_start + len(line.rstrip())
                if escaped and text.startswith("\\t", start):
                    start += 2
            replace(start, end, users)
            if first and end > start:
                return

    for match in pattern.finditer(text):
        if match.start() < pos:
            continue
        command = (match.group("reader") or match.group("writer") or match.group("shown")).split()[0]
        users = command in _USER_LINES
        if match.group("writer") is not None or match.group("here"):
            value_at(match.end(), users)
        elif match.group("shown") is not None:
            lines_from(match.end(), users, None)
        else:
            tag = _HEREDOC_TAG.match(text, match.end())
            if tag is not None:
                lines_from(tag.end(), users, tag.group("tag"), first=not users and command not in _LINES_ALL)
    out.append(text[pos:])
    return "".join(out), hits


def _redact_yaml_block(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    """A secret-named YAML key's block scalar (each line replaced) or list (each item replaced)."""
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        block, items = match.group("block"), match.group("items")
        body = block if block is not None else items
        if body is None:
            return match.group(0)
        head = match.group(0)[: match.start("block" if block is not None else "items") - match.start()]
        out = []
        for line in body.splitlines(keepends=True):
            stripped = line.strip()
            if not stripped:
                out.append(line)
                continue
            lead = line[: len(line) - len(line.lstrip())]
            if items is not None and stripped.startswith("-"):
                lead += "- "
            value = stripped.lstrip("- ").strip() if items is not None else stripped
            if _placeholder(value.strip("\"'")):
                out.append(line)
                continue
            out.append(f"{lead}{replacement}" + ("\n" if line.endswith("\n") else ""))
            hits += 1
        return head + "".join(out)

    return pattern.sub(sub, text), hits


# -- the entropy backstop ---------------------------------------------------------------------------

_KEYWORD_NEAR = r"(?i)(?:key|secret|token|passw|pwd|cred|auth|signature|fernet|cookie|bearer|private|api|пароль|密码)"
_ASSIGNED = r"[=:\uff1a][ \t]*[\"'`]?$"
#: The name of a key or token right before a word: "api key 3f2a…", "the license key ABCD…",
#: "auth token 9f3c…", "ALGOLIA_ADMIN_KEY 0f3c…" ("token 3f9a…" alone stays: a hash as often, as
#: does "PRIMARY_KEY 3f9a…").
_KEY_NAMED = (
    r"(?<![\w-])(?:(?i:(?:api|access|secret|private|license|account|subscription|master)[ _-]?key"
    r"|(?:auth|access|api|secret|bearer|session|refresh)[ _-]?token)"
    r"|(?!(?:PRIMARY|FOREIGN|SORT|PARTITION|CACHE|IDEMPOTENCY|ROW|LOOKUP|HASH|SHARD|DEDUP|INDEX)_KEY)"
    r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:KEY|TOKEN|SECRET))[ \t]+$"
)
# The words of an identifier: camelCase, TitleCase and UPPER words and numbers.
_WORDS_OF = r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+"
_VOWEL = re.compile("[aeiouAEIOU]")
_NOT_KEYS = ("base64,", "sha1-", "sha256-", "sha384-", "sha512-", "sha1:", "sha256:", "sha512:", "md5:")
_DIGEST_PREFIXES = ("sha1-", "sha256-", "sha384-", "sha512-")
_IMAGE_MAGIC = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR", "PHN2Zy", "Qk0")


def _entropy(word: str) -> float:
    from math import log2

    n = len(word)
    counts: dict[str, int] = {}
    for c in word:
        counts[c] = counts.get(c, 0) + 1
    return -sum(k / n * log2(k / n) for k in counts.values())


def _identifier(word: str) -> bool:
    """Whether ``word`` reads as an identifier (snake_case, kebab-case, CONSTANT_CASE, camelCase: words
    of three letters or more, a number or two) rather than random characters, whose case changes and
    digits cut it into many short pieces."""
    if any(not (c.isascii() and (c.isalnum() or c in "_/-")) for c in word):
        return False  # base64's + and =
    parts = re.findall(_WORDS_OF, word)
    short = sum(len(p) <= 2 for p in parts)
    numbers = sum(p.isdigit() for p in parts)
    # Words are spoken: two of three letters or more, not all capitals, without a vowel ("Kzg",
    # "Ysr") are random letters ("Http" and "Cfg" one each at most, in an identifier).
    unspoken = sum(len(p) >= 3 and not p.isupper() and not p.isdigit() and not _VOWEL.search(p) for p in parts)
    return bool(parts) and short * 4 <= len(parts) and numbers <= 2 and unspoken < 2


_PUBLIC_KEY_BLOBS = ("AAAAB3NzaC1", "AAAAC3NzaC1", "AAAAE2VjZHNh", "AAAAGnNr")  # ssh-rsa, ed25519, ecdsa, sk-


def _random_word(text: str, start: int, word: str) -> bool:
    """Whether ``word`` (at ``start`` of ``text``) is a random key that no rule named: after a
    secret-sounding word on its line, after an assignment, or a long word of mixed case and digits
    with high entropy anywhere; a hash, a UUID, an identifier, a path, a data URI or an integrity
    digest is kept."""
    core = word.strip("=.-_~")
    if len(core) < 16:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 48) : start]
    if before.endswith(_NOT_KEYS) or core.startswith(_IMAGE_MAGIC) or core.startswith(_DIGEST_PREFIXES):
        return False
    if core.startswith(_PUBLIC_KEY_BLOBS):
        return False  # an SSH public key (authorized_keys, *.pub) is no secret
    if "." in core or "~" in core or ("/" in core and ("-" in core or "_" in core)):
        # A path, a URL, a file or module name: no key alphabet mixes these. But a key may follow
        # dotted words of its kind (dp.st.prd.<key>): a part that is a key on its own is one.
        return "." in core and any(len(part) >= 20 and _random_word(text, start, part) for part in core.split("."))
    if _identifier(core):
        return False
    if _UUID.search(core) is not None:
        return False
    digits = sum(c.isdigit() for c in core)
    # upper and lower case with digits, or base64's + and / (a 40-character key may have no digit)
    cased = any(c.isupper() for c in core) and any(c.islower() for c in core)
    mixed = cased and (digits > 0 or "+" in core or "/" in core)
    if not digits and not mixed:
        # letters alone: a key when long, of both cases and as random as one (1 in 1,100 random
        # 40-character keys holds no digit)
        if not (cased and len(core) >= 32 and _entropy(core) >= 4.5):
            return False
        mixed = True
    hexy = all(c in "0123456789abcdefABCDEF" for c in core)
    keyword = re.search(_KEYWORD_NEAR, before) is not None
    entropy = _entropy(core)
    if hexy:
        # a hex key only as a secret-named value ("token: 9f…") or right after the name of a key
        # ("dd api key 3f2a…", "auth token 9f3c…"): "commit 3f9a…" and "token 3f9a…" are hashes
        # (right after a key's name, a lower bar: 1 in 20 random 32-digit keys is under 3.3)
        if re.search(_KEY_NAMED, before) is not None:
            return keyword and len(core) >= 32 and entropy >= 3.0
        return keyword and len(core) >= 32 and entropy >= 3.3 and re.search(_ASSIGNED, before) is not None
    if keyword and (digits >= 2 or mixed) and entropy >= 3.5:
        return True
    if mixed and len(core) >= 20 and entropy >= 3.7 and re.search(_ASSIGNED, before) is not None:
        return True
    return mixed and len(core) >= 30 and entropy >= 4.2


def _redact_random(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    hits = 0

    def judged(start: int, word: str) -> str:
        """``word`` (at ``start``) with its key replaced, if it holds one: a word holding an "="
        before its padding is a key from there on if what precedes the "=" is one, else that is a
        name, kept, and what follows is judged the same way (in one pass: a word of a thousand
        "name=" parts is no recursion)."""
        nonlocal hits
        end = len(word.rstrip("="))
        pos = 0
        while True:
            cut = word.find("=", pos, end)
            if cut < 0:  # no "=" left inside: what follows the last name is judged whole
                if not _random_word(text, start + pos, word[pos:]):
                    return word
                break
            if _random_word(text, start + pos, word[pos:cut]):
                break
            pos = cut
            while pos < end and word[pos] == "=":
                pos += 1
        hits += 1
        return word[:pos] + replacement

    return pattern.sub(lambda match: judged(match.start(), match.group(0)), text), hits


#: Built-in rules whose replacement needs code, by name: (pattern, replacement, text) → (text, hits).
_SUBSTITUTES: dict[str, Callable[[re.Pattern[str], str, str], tuple[str, int]]] = {
    "pem_private_key_tail": _redact_pem_tails,
    "authorization_header": _redact_header,
    "secret_flag": _redact_assignments,
    "password_pair": _redact_assignments,
    "credit_card": _redact_cards,
    "fernet_key": _redact_where(_random_key),
    "key_lines": _redact_key_lines,
    "encoded_private_key": _redact_encoded_key,
    "cli_password": _redact_assignments,
    "cli_password_tools": _redact_assignments,
    "named_value_below": _redact_named,
    "keyword_assignment": _redact_named,
    "named_argument": _redact_named,
    "connect_password": _redact_assignments,
    "netrc_password": _redact_loose,
    "spoken_password": _redact_loose,
    "spoken_key": _redact_loose,
    "config_directive": _redact_loose,
    "config_secret_line": _redact_assignments,
    "spoken_token": _redact_spoken_token,
    "variable_set_to": _redact_loose,
    "login_pair": _redact_login_pair,
    "pgpass_line": _redact_where(_pgpass_secret),
    "iban": _redact_where(_iban_valid),
    "security_answer": _redact_assignments,
    "quoted_label": _redact_assignments,
    "stdin_password": _redact_stdin,
    "yaml_secret_block": _redact_yaml_block,
    "random_token": _redact_random,
}

# -- names of secret fields ------------------------------------------------------------------------

# Matched against the whole name, lower-cased, camelCase and separators turned into ``_``.
_SECRET_FIELD = (
    r".*pass(?:word|wd|phrase|code)|.*psk|.*(?:passwort|kennwort|contrase(?:ñ|n)a|пароль|密码|mot_de_passe)"
    r"|(?:.*_)?(?:secrets?|token|credentials?|auth|authorization|cookie|apikey|sessionid|secret_key_base"
    r"|connection_?string|conn_?str"
    r"|(?:api|access|secret|private|signing|encryption|master|client|app|auth|license|account|subscription"
    r"|storage|fernet)_?key|(?:client|private)_key_data)"
    r"|.+_(?:pass|pwd|pw)"
)
_NAME_FIELDS = ("name", "key", "setting", "variable", "var", "env", "field", "param", "parameter", "option")
_VALUE_FIELDS = frozenset(("value", "new_value", "old_value", "new", "old", "default", "current", "previous"))


@functools.lru_cache(maxsize=4096)  # field names repeat: every record of a kind has the same keys
def is_secret_name(name: str) -> bool:
    """Whether a field or variable called ``name`` holds a secret: its last part is a secret
    word (``password``, ``DATABASE_PASSWORD``, ``clientSecret``, ``x-api-key``, ``access_token``,
    ``Authorization``, ``PGPASSWORD``, ``MYSQL_PWD``), not a word about one (``token_count``,
    ``max_tokens``, ``password_hash``, ``key``, ``author``)."""
    if not name or len(name) > 128:
        return False
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip().strip("\"'"))
    return re.fullmatch(_SECRET_FIELD, re.sub(r"[\s.\-/:]+", "_", words).lower()) is not None


#: Rules whose matches lie within one line and whose checks read nothing past it: on a text of
#: more than two chunks they run chunk by chunk (whole lines, ``_CHUNK_CHARS`` or a little more
#: each), on the chunks that pass the rule's precheck only. A pasted log of 6 MB with one secret
#: word in its first line ran each of them over all of it: 2.6 s in all, past the 2 s a coding
#: agent gives its prompt hook, which then lost the prompt.
_LINE_RULES = frozenset(
    ("secret_flag", "password_pair", "github_token", "service_token", "fernet_key", "random_token", "credit_card")
)
_CHUNK_CHARS = 65_536
#: Texts a redactor returned are remembered, so that redacting one again (the write boundary redacts
#: what a capture filter redacted already, keys and values alike) costs a lookup: the last
#: ``_MEMO_SHORT`` texts under ``_MEMO_LONG_CHARS`` characters and the last ``_MEMO_LONG`` texts up to
#: ``_MEMO_MAX_CHARS`` (longer ones would hold too much memory).
_MEMO_LONG_CHARS = 256
_MEMO_MAX_CHARS = 256 * 1024
_MEMO_SHORT = 4096
_MEMO_LONG = 32


def _holds_secret(value: Any) -> bool:
    return value is not None and not isinstance(value, bool) and value != ""


# -- the maintained rule set: detect-secrets' plugins ---------------------------------------------------

#: detect-secrets plugins left out: public IP addresses are no secret, and its high-entropy plugins
#: (quoted strings only, hex digests included) are replaced by our backstop (``random_token``).
_LIBRARY_SKIPPED = frozenset(("IPPublicDetector", "Base64HighEntropyString", "HexHighEntropyString"))
_LIBRARY_REPLACEMENT = "[SECRET_REDACTED]"


class LibraryDetector:
    """detect-secrets' plugins (Yelp's rule set, maintained by others) run on a text in process: its
    regex plugins on pieces of whole lines (:func:`_pieces`: some of its patterns read the rest of a
    text from every place they start, 12.9 s for 100 KB of "sk-"; the OpenAI one only on a piece that
    holds the literal all its keys hold), its keyword plugin line by line on the lines that hold one
    of its words; each secret found is replaced wherever it occurs. Its file scanning, baselines and
    verification (network) are not used. Imported on first use (about 0.15 s: a hook process never
    builds one). A value the built-in rules would keep (a placeholder, a code expression, a word of
    prose) is kept."""

    def __init__(self) -> None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins import keyword

        self._keyword_module = keyword
        # the keyword plugin's words: only a line holding one is given to it
        self._words = re.compile("|".join(keyword.DENYLIST), re.IGNORECASE)
        self.plugins: list[Any] = []
        self.keyword: Any = None
        classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
        for cls in classes:
            if cls.__name__ in _LIBRARY_SKIPPED:
                continue
            if cls.__name__ == "KeywordDetector":
                self.keyword = cls()
            else:
                self.plugins.append(cls())
        # Each plugin, and the literal its every pattern holds in the version installed (None: none
        # known): a piece without it is not given to the plugin.
        self._scans = [(plugin, _needed(plugin)) for plugin in self.plugins]

    def secrets(self, text: str) -> set[tuple[str, str]]:
        """(detect-secrets type, value) of each secret found in ``text``."""
        found: set[tuple[str, str]] = set()
        for piece in _pieces(text):
            for plugin, needed in self._scans:
                if needed is not None and needed not in piece:
                    continue
                for value in plugin.analyze_string(piece):
                    found.add((plugin.secret_type, value))
        if self.keyword is not None and self._words.search(text) is not None:
            module = self._keyword_module
            attempts = (module.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, module.CONFIG_DENYLIST_REGEX_TO_GROUP)
            for line in text.splitlines():
                if len(line) > 4096 or self._words.search(line) is None:
                    continue
                for groups in attempts:
                    for value in self.keyword.analyze_string(line, groups):
                        if _library_keyword_secret(value):
                            found.add((self.keyword.secret_type, value))
        return {(kind, value) for kind, value in found if len(value) >= 6 and "REDACTED" not in value}

    def redact(self, text: str, counts: dict[str, int] | None = None) -> str:
        for kind, value in sorted(self.secrets(text), key=lambda found: -len(found[1])):
            n = text.count(value)
            if n:
                text = text.replace(value, _LIBRARY_REPLACEMENT)
                if counts is not None:
                    name = "detect_secrets_" + re.sub(r"\W+", "_", kind.lower()).strip("_")
                    counts[name] = counts.get(name, 0) + n
        return text


#: A literal every match of a library plugin holds: without it in a piece, the plugin is not run.
_PLUGIN_NEEDS = {"OpenAIDetector": "T3BlbkFJ"}


def _needed(plugin: Any) -> str | None:
    """The literal of :data:`_PLUGIN_NEEDS` for ``plugin``, if every one of its patterns holds it."""
    needed = _PLUGIN_NEEDS.get(type(plugin).__name__)
    patterns = [getattr(p, "pattern", "") for p in getattr(plugin, "denylist", ())]
    return needed if needed is not None and patterns and all(needed in p for p in patterns) else None


#: The pieces the library's regex plugins read: whole lines up to this many characters together; a
#: longer line in windows of this size overlapping by ``_PIECE_OVERLAP`` (no secret it finds is longer).
_PIECE_CHARS = 4096
_PIECE_OVERLAP = 1024


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``_PIECE_CHARS`` characters: whole lines joined, a longer line
    in overlapping windows."""
    if len(text) <= _PIECE_CHARS:
        yield text
        return
    start = 0
    while start < len(text):
        end = text.rfind("\n", start, start + _PIECE_CHARS)
        if start + _PIECE_CHARS >= len(text):
            end = len(text)
        elif end <= start:  # one line longer than a piece: a window, then on from inside it
            yield text[start : start + _PIECE_CHARS]
            start += _PIECE_CHARS - _PIECE_OVERLAP
            continue
        yield text[start:end]
        start = end + 1


def _library_keyword_secret(value: str) -> bool:
    """A value detect-secrets' keyword plugin found that is a secret, not prose or code: one word,
    not a placeholder or a code expression, not a word of letters alone."""
    value = value.strip()
    if not value or any(c.isspace() for c in value) or _placeholder(value):
        return False
    if re.fullmatch(_CODE, value) or re.fullmatch(_CALL_CUT, value) or re.fullmatch(_IDENTIFIER, value):
        return False
    return not value.rstrip(".,;:!?)").isalpha()


@functools.lru_cache(maxsize=1)
def library_detector() -> LibraryDetector:
    """The process's one :class:`LibraryDetector` (its plugins are stateless)."""
    return LibraryDetector()


class Redactor:
    """Redaction rules, compiled on first need. ``redact(text)`` returns the new text and adds
    hits per rule to ``counts``. With ``library``, detect-secrets' plugins run after the rules
    (:class:`LibraryDetector`): what the store applies; a hook process applies the rules alone."""

    def __init__(self, rules: list[tuple[str, str, str]], *, builtin: int = 0, library: bool = False) -> None:
        self.rules = rules
        self.builtin = builtin  # the first ``builtin`` rules are DEFAULT_REDACTIONS (have prechecks)
        self.library = library
        self._compiled: dict[int, re.Pattern[str]] = {}
        # Texts this redactor returned lately (clean: redaction is idempotent), short and long.
        self._short: dict[str, None] = {}
        self._long: dict[str, None] = {}

    def _pattern(self, i: int) -> re.Pattern[str]:
        pattern = self._compiled.get(i)
        if pattern is None:
            pattern = self._compiled[i] = re.compile(self.rules[i][1])
        return pattern

    def redact(self, text: str, counts: dict[str, int] | None = None) -> str:
        """``text`` with every rule applied; adds hits per rule name to ``counts``. Idempotent:
        redacting a redacted text changes nothing."""
        if text in (self._short if len(text) < _MEMO_LONG_CHARS else self._long):
            return text
        probe = _Text(text)
        for i, name in enumerate(rule[0] for rule in self.rules):
            builtin = i < self.builtin
            check = _PRECHECKS.get(name) if builtin else None
            if check is not None and not check(probe):
                continue
            if builtin and name in _LINE_RULES and len(text) > 2 * _CHUNK_CHARS:
                text, n = self._by_chunks(i, text)
            else:
                text, n = self._apply(i, text)
            if n:
                probe = _Text(text)
                if counts is not None:
                    counts[name] = counts.get(name, 0) + n
        if self.library:
            text = library_detector().redact(text, counts)
        self._remember(text)
        return text

    def _apply(self, i: int, text: str) -> tuple[str, int]:
        """Rule ``i`` applied to ``text``: the text and the hits."""
        name, _, replacement = self.rules[i]
        substitute = _SUBSTITUTES.get(name) if i < self.builtin else None
        if substitute is not None:
            return substitute(self._pattern(i), replacement, text)
        return self._pattern(i).subn(replacement, text)

    def _by_chunks(self, i: int, text: str) -> tuple[str, int]:
        """A rule of :data:`_LINE_RULES` applied chunk by chunk, where its precheck passes."""
        check = _PRECHECKS.get(self.rules[i][0])
        parts, hits, start = [], 0, 0
        while start < len(text):
            end = text.find("\n", start + _CHUNK_CHARS)
            end = len(text) if end < 0 else end + 1
            part = text[start:end]
            if check is None or check(_Text(part)):
                part, n = self._apply(i, part)
                hits += n
            parts.append(part)
            start = end
        return "".join(parts), hits

    def _remember(self, text: str) -> None:
        """Remember ``text`` as clean (see :data:`_MEMO_SHORT`); the oldest goes when there are too many."""
        if len(text) < _MEMO_LONG_CHARS:
            memo, limit = self._short, _MEMO_SHORT
        elif len(text) <= _MEMO_MAX_CHARS:
            memo, limit = self._long, _MEMO_LONG
        else:
            return
        memo[text] = None
        if len(memo) > limit:
            try:
                memo.pop(next(iter(memo)), None)
            except (RuntimeError, StopIteration):  # another thread changed it meanwhile: next time
                return

    def redact_value(self, value: Any, counts: dict[str, int] | None = None) -> Any:
        """Redact a JSON-like value at any depth: every string (dict keys included: a secret used
        as a key is as much a leak as one used as a value), and, with the built-in rules, the
        whole value of a secret-named field (:func:`is_secret_name`; ``None``, booleans and
        ``""`` are kept) and the value fields of a ``{"name": <secret name>, "value": …}`` entry.
        Two keys that redact to the same text are both kept: the later one gets a ``_2``,
        ``_3``… suffix. Tuples become lists."""
        if isinstance(value, str):
            return self.redact(value, counts)
        if isinstance(value, Mapping):
            secret_entry = self.builtin > 0 and any(
                isinstance(value.get(f), str) and is_secret_name(value[f]) for f in _NAME_FIELDS
            )
            out: dict[Any, Any] = {}
            for k, v in value.items():
                key = self.redact(k, counts) if isinstance(k, str) else k
                if key in out:
                    n = 2
                    while f"{key}_{n}" in out:
                        n += 1
                    key = f"{key}_{n}"
                named = isinstance(k, str) and (
                    (self.builtin > 0 and is_secret_name(k)) or (secret_entry and k in _VALUE_FIELDS)
                )
                if named and _holds_secret(v):
                    out[key] = FIELD_REPLACEMENT
                    if counts is not None:
                        counts["secret_field"] = counts.get("secret_field", 0) + 1
                else:
                    out[key] = self.redact_value(v, counts)
            return out
        if isinstance(value, list | tuple):
            return [self.redact_value(v, counts) for v in value]
        return value

    def redact_session_id(
        self, session_id: str, counts: dict[str, int] | None = None, *, key: bytes | Callable[[], bytes] = b""
    ) -> str:
        """The session id to write for ``session_id``: itself when no rule matches it, else its
        redacted text plus ``~`` and a digest of the whole id (``deploy-[AWS_KEY_REDACTED]~3f9a0c1b2d``).
        Stable (the same id always gives the same result, so a session's memories stay together
        and a search by the raw id finds them when the reader maps it the same way), distinct for
        distinct ids (two secrets do not merge two sessions), and idempotent (a mapped id maps to
        itself). ``key`` (bytes, at most 64, or a function giving them, called only for an id that
        carries a secret) keys the digest: without it, the digest of an id with a weak password
        could confirm a guess of it; a store passes a secret of its own (:func:`session_key`)."""
        redacted = self.redact(session_id, counts)
        if redacted == session_id:
            return session_id
        from hashlib import blake2b  # only ids that carried a secret pay for the import

        secret = key() if callable(key) else key
        digest = blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=5, key=secret).hexdigest()
        return f"{redacted}~{digest}"

    def check(self) -> None:
        """Compile every user rule now; raises ValueError naming the first pattern that does not
        compile (``privacy.redact_patterns[i].regex``), so that a config error is reported, not hit
        mid-capture. The built-in rules are constants (their tests compile them): a hook process
        compiles one only when its precheck says it may match."""
        for i in range(self.builtin, len(self.rules)):
            try:
                self._pattern(i)
            except re.error as exc:
                where = f"privacy.redact_patterns[{i - self.builtin}].regex" if i >= self.builtin else self.rules[i][0]
                raise ValueError(
                    f"{where}: {self.rules[i][1]!r} is not a valid regular expression ({exc}); expected a Python regex"
                ) from None


def redact_then_truncate(
    text: str,
    limit: int,
    redactor: Redactor | None,
    counts: dict[str, int] | None = None,
    *,
    flatten: bool = False,
    ellipsis: str = "…",
) -> str:
    """THE way a capture path shortens a text: redact the whole text, then cut it to ``limit``
    characters (``ellipsis`` included). Cutting first could split a secret so that no rule
    matches its remaining head (``…AKIAIOSFODNN7EXA``); cutting redacted text cannot. With
    ``flatten`` runs of whitespace become one space (after redaction, so multi-line blocks such
    as PEM keys are still whole when the rules see them). ``redactor`` None (``privacy.redact``
    off) only cuts."""
    if redactor is not None:
        text = redactor.redact(text, counts)
    if flatten:
        text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ellipsis))] + ellipsis


def build_redactor(
    redact: bool = True,
    defaults: bool = True,
    patterns: tuple[tuple[str, str, str], ...] = (),
    *,
    library: bool = False,
) -> Redactor | None:
    """The redactor for these privacy settings; None when ``redact`` is off. ``library`` adds
    detect-secrets' plugins (with ``defaults`` only): the store's pass; without it, the fast rules a
    hook process applies before its spool write."""
    if not redact:
        return None
    rules = list(DEFAULT_REDACTIONS) if defaults else []
    return Redactor(rules + list(patterns), builtin=len(rules), library=library and defaults)


def redactor_for(privacy: Any) -> Redactor | None:
    """The store's redactor for a ``PrivacySettings`` (``privacy.redact``, ``redact_defaults``,
    ``redact_patterns``): the rules and detect-secrets' plugins."""
    patterns = tuple(
        (rule.name or f"custom_{i}", rule.regex, rule.replacement) for i, rule in enumerate(privacy.redact_patterns)
    )
    return build_redactor(privacy.redact, privacy.redact_defaults, patterns, library=True)


# -- one store's redactor -----------------------------------------------------------------------------

#: The file in the storage directory holding the store's key for session-id digests.
SESSION_KEY_NAME = "session-ids.key"
_KEY_BYTES = 32


def session_key(storage: str | os.PathLike[str]) -> bytes:
    """The store's key for session-id digests: the bytes of ``<storage>/session-ids.key`` (0600),
    32 random bytes made on first need (:func:`~remindful.owned.secret_key`). It is not
    part of backups or exports: a copy of the catalog without it cannot confirm a guess of the
    secret behind a digest. Raises OSError when the directory can be neither read nor written."""
    path = os.path.join(storage, SESSION_KEY_NAME)
    if not os.path.exists(path):
        private_dir(storage, "storage directory")
    return secret_key(path, _KEY_BYTES)


class StoreRedactor:
    """The redaction every write of one store passes: ``rules`` (None when ``privacy.redact`` is
    off: everything is written as given) and the store's key for session ids (:func:`session_key`,
    read on the first id that carries a secret). The catalog holds one and uses it in each method
    that writes; a hook process builds one for its storage directory.

    ``text`` and ``value`` are :meth:`Redactor.redact` and :meth:`Redactor.redact_value`;
    ``session_id`` is :meth:`Redactor.redact_session_id` with the store's key, so every process
    writing to (or looking up in) one store maps one raw id to the same stored id."""

    def __init__(self, rules: Redactor | None, storage: str | os.PathLike[str]) -> None:
        self.rules = rules
        self.storage = os.fspath(storage)
        self._key: bytes | None = None

    def text(self, text: str, counts: dict[str, int] | None = None) -> str:
        return text if self.rules is None else self.rules.redact(text, counts)

    def value(self, value: Any, counts: dict[str, int] | None = None) -> Any:
        return value if self.rules is None else self.rules.redact_value(value, counts)

    def session_id(self, session_id: str, counts: dict[str, int] | None = None) -> str:
        """The id under which session ``session_id`` is stored (and looked up); ValidationError for
        one longer than :data:`~remindful.runtime.SESSION_ID_MAX_CHARS` (every surface reads and
        writes session ids through here: a hook shortens a long one before, to keep its event)."""
        if len(session_id) > SESSION_ID_MAX_CHARS:
            from remindful.errors import ValidationError

            raise ValidationError(
                "session_id", f"expected at most {SESSION_ID_MAX_CHARS} characters, got {len(session_id)}"
            )
        if self.rules is None:
            return session_id
        return self.rules.redact_session_id(session_id, counts, key=self.key)

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """What decides how this redaction changes a text, as a digest: the rules (built-in and the
        user's, in order), whether detect-secrets' plugins run and its version, and this module's
        code. Two stores (or one store at two times) with the same fingerprint redact every text
        alike: a text that passed one passes the other unchanged. None when it cannot be told (this
        module's file cannot be read, detect-secrets' version is unknown): then nothing is taken to
        have passed."""
        return _fingerprint(self.rules)

    def key(self) -> bytes:
        """The store's session-id key; an unkeyed digest (b"") when the storage directory can be
        neither read nor written, where nothing is written either."""
        key = self._key
        if key is None:
            try:
                key = session_key(self.storage)[:64]
            except OSError:
                key = b""
            self._key = key
        return key

    def record(self, record: Mapping[str, Any], counts: dict[str, int] | None = None) -> dict[str, Any]:
        """A spool record (a JSON object) as it may be written: its ``session_id`` mapped, every
        other field redacted at any depth."""
        out = self.value({k: v for k, v in record.items() if k != "session_id"}, counts)
        if "session_id" in record:
            raw = record["session_id"]
            out["session_id"] = self.session_id(raw, counts) if isinstance(raw, str) else self.value(raw, counts)
        return dict(out)


def _fingerprint(rules: Redactor | None) -> str | None:
    """:attr:`StoreRedactor.fingerprint` of ``rules``."""
    import hashlib
    import json
    from importlib import metadata

    if rules is None:
        return "off"
    try:
        with open(__file__, "rb") as f:
            code = hashlib.sha256(f.read()).hexdigest()
        library = metadata.version("detect-secrets") if rules.library else None
    except (OSError, metadata.PackageNotFoundError):
        return None
    described = [code, library, rules.builtin, [list(rule) for rule in rules.rules]]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()


# -- counts of redactions and skipped captures: the catalog table ``capture_stats`` ----------------


def add_counts(conn: Any, counts: Mapping[str, int]) -> None:
    """Add ``counts`` (name → hits) to ``capture_stats`` inside the caller's transaction. The table
    is :data:`remindful.engine.schema.CAPTURE_STATS_DDL`: the catalog creates it at open, and a hook
    process that finds no catalog creates it with the spool."""
    if counts:
        conn.executemany(
            "INSERT INTO capture_stats (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            list(counts.items()),
        )


def read_counts(read: Callable[[str], list[Any]]) -> dict[str, int]:
    """Counts from ``capture_stats``, by name (empty if nothing was ever counted); ``read`` runs a
    query on an open catalog (``catalog.read``)."""
    return {str(k): int(v) for k, v in read("SELECT name, value FROM capture_stats ORDER BY name")}


__all__ = [
    "DEFAULT_REDACTIONS",
    "FIELD_REPLACEMENT",
    "SESSION_KEY_NAME",
    "LibraryDetector",
    "Redactor",
    "StoreRedactor",
    "add_counts",
    "build_redactor",
    "is_secret_name",
    "library_detector",
    "read_counts",
    "redact_then_truncate",
    "redactor_for",
    "session_key",
]
