"""Secret detection corpus: every kind of secret the matrix knows, many samples each, through the
redactors alone; and the ordinary developer text they must leave unchanged.

Two redactors are measured, as the store uses them: ``hook`` (the fast rules and the entropy backstop
a hook process applies before its spool write: standard library only) and ``store`` (the same plus
the detect-secrets plugins, what the catalog applies to every row it writes, at import and restore
too). A sample leaks when any 8-character piece of its secret (12 digits for a card) survives, case
ignored (the matrix's rule). The ordinary texts: the fixture's lines, stdlib code in blocks of ten
lines, LoCoMo turns, this repository's git log, generated logs, hashes (git, sha256, npm integrity),
UUIDs, base64 images and long identifiers; a text counts as changed when redaction changed any
character of it.

The kinds and their generators are shared with ``bench/secret_matrix.py`` (which sends one sample of
each kind through every write path and scans the store's files, exports and backups included).
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
WINDOW = 8  # the shortest piece of a secret that counts as a leak
CARD_WINDOW = 12  # digits: 8 digits appear by chance in timestamps and ids
#: Hex digits alone: 8 of them appear by chance in the store's own hashes and ids (content hashes,
#: the ids' uuid part, tombstone keys: some 10^5 hex characters beside a 128-digit secret match an
#: 8-digit piece about once in a hundred runs); 16 (64 bits) do not.
HEX_WINDOW = 16
CANARY = "canary"

# -- the kinds of secret -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One cell's secret: ``text`` (the secret in its usual context), ``bare`` (the secret alone, for a
    field named ``field``), ``pieces`` (the parts unique to this cell that must never be found)."""

    text: str
    bare: str
    pieces: tuple[str, ...]
    field: str = "api_key"
    digits: bool = False  # pieces are digits: matched on CARD_WINDOW digits, separators ignored


def _rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choices(alphabet, k=n))


def _password(rng: random.Random, n: int = 16) -> str:
    """A strong password: letters, digits and punctuation that ends no unquoted value."""
    body = _rand(rng, n - 3) + rng.choice("!#^*+") + _rand(rng, 1, string.digits) + rng.choice("!#^*+")
    return rng.choice(string.ascii_letters) + body


def _luhn_complete(prefix: str) -> str:
    for check in string.digits:
        digits = prefix + check
        total = 0
        for i, ch in enumerate(reversed(digits)):
            n = int(ch) * (2 if i % 2 else 1)
            total += n - 9 if n > 9 else n
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


def _aws(rng: random.Random) -> Sample:
    key = "AKIA" + _rand(rng, 16, string.ascii_uppercase + string.digits)
    return Sample(f"The deploy job signs S3 requests with {key} today", key, (key[4:],))


def _github_classic(rng: random.Random) -> Sample:
    token = "ghp_" + _rand(rng, 36)
    return Sample(f"git push with GH token {token} for the release", token, (token[4:],))


def _github_fine(rng: random.Random) -> Sample:
    a, b = _rand(rng, 22), _rand(rng, 59)
    token = f"github_pat_{a}_{b}"
    return Sample(f"gh auth login --with-token {token}", token, (a, b))


def _openai(rng: random.Random) -> Sample:
    key = "sk-proj-" + _rand(rng, 48)
    return Sample(f"OpenAI client configured with {key} in the notebook", key, (key[8:],))


def _jwt(rng: random.Random) -> Sample:
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(json.dumps({"sub": _rand(rng, 24)}).encode()).rstrip(b"=").decode()
    signature = _rand(rng, 43, ALNUM + "-_")
    token = f"{header}.{payload}.{signature}"
    return Sample(f"the session cookie held {token} after login", token, (payload[12:], signature))


def _pem(rng: random.Random) -> Sample:
    lines = [_rand(rng, 64, B64) for _ in range(12)]
    block = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----"
    return Sample(f"deploy key:\n{block}\nend of key", block, tuple(lines), field="private_key")


def _password_pair(rng: random.Random) -> Sample:
    password = _password(rng)
    return Sample(f"log in to the admin panel with password={password} then reset", password, (password,), "password")


ENV_NAMES = ("DATABASE_PASSWORD", "SECRET_KEY", "PGPASSWORD", "MYSQL_PWD", "STRIPE_API_KEY", "SLACK_BOT_TOKEN")
ENV_FORMS = ("export {name}={value}", '{name}="{value}" ./manage.py migrate', "{name}={value}")


def _env(rng: random.Random) -> Sample:
    value = _password(rng, 20)
    name, form = rng.choice(ENV_NAMES), rng.choice(ENV_FORMS)
    return Sample(form.format(name=name, value=value), value, (value,), "password")


def _slack(rng: random.Random) -> Sample:
    tail = f"{_rand(rng, 11, string.digits)}-{_rand(rng, 12, string.digits)}-{_rand(rng, 24)}"
    return Sample(f"the bot posts with xoxb-{tail} to #deploys", f"xoxb-{tail}", (tail,))


def _stripe(rng: random.Random) -> Sample:
    secret = _rand(rng, 24)
    key = f"sk_{rng.choice(('live', 'test'))}_{secret}"
    return Sample(f"charge the card through Stripe with {key}", key, (secret,))


def _bearer(rng: random.Random) -> Sample:
    token = _rand(rng, 30, ALNUM + "._-") + _rand(rng, 2, string.digits)
    return Sample(
        f"curl -H 'Authorization: Bearer {token}' https://api.internal/v1/items", token, (token,), "authorization"
    )


def _google(rng: random.Random) -> Sample:
    key = "AIza" + _rand(rng, 35, ALNUM + "_-")
    return Sample(f"maps client uses key {key} for geocoding", key, (key[4:],))


def _huggingface(rng: random.Random) -> Sample:
    token = "hf_" + _rand(rng, 34)
    return Sample(f"huggingface-cli login --token {token}", token, (token[3:],))


def card_sample(rng: random.Random, grouped: bool | None = None) -> Sample:
    if grouped if grouped is not None else rng.random() < 0.5:  # a Luhn-valid Visa number, grouped
        number = _luhn_complete("4" + _rand(rng, 14, string.digits))
        shown = " ".join(number[i : i + 4] for i in range(0, 16, 4))
    else:  # the specification's \b\d{16}\b: any bare 16 digits, Luhn or not
        number = shown = rng.choice("3456") + _rand(rng, 15, string.digits)
    return Sample(f"paid the invoice with card {shown} yesterday", shown, (number,), "card_number", digits=True)


def _url_password(rng: random.Random) -> Sample:
    password = _password(rng)
    url = f"postgres://app:{password}@db.internal:5432/prod"
    return Sample(f"DATABASE_URL is {url} for the app", url, (password,), "dsn")


def _json_pair(rng: random.Random) -> Sample:
    value = _rand(rng, 28)
    return Sample(json.dumps({"service": "billing", "api_key": value}), value, (value,))


def _email(rng: random.Random) -> Sample:
    local = _rand(rng, 14, string.ascii_lowercase + string.digits)
    return Sample(f"send the report to {local}@example.com tonight", f"{local}@example.com", (local,), "email")


def _canary(rng: random.Random) -> Sample:
    word = "canary" + _rand(rng, 14, string.ascii_lowercase)
    return Sample(f"ordinary note about {word} in the deploy", word, (word,), "note")


#: The kinds of the first matrix (issue 28).
BASE_KINDS: dict[str, Callable[[random.Random], Sample]] = {
    "aws_access_key": _aws,
    "github_ghp": _github_classic,
    "github_pat": _github_fine,
    "openai_sk": _openai,
    "jwt": _jwt,
    "pem_private_key": _pem,
    "password_pair": _password_pair,
    "env_assignment": _env,
    "slack_xoxb": _slack,
    "stripe_sk": _stripe,
    "bearer_header": _bearer,
    "google_aiza": _google,
    "huggingface_hf": _huggingface,
    "card_16_digits": card_sample,
    "url_password": _url_password,
    "json_secret_key": _json_pair,
    "email": _email,
    CANARY: _canary,
}


# -- the kinds issue 32 found leaking: real formats, command lines, config files, other languages ------


def _b64(rng: random.Random, n_bytes: int, urlsafe: bool = False) -> str:
    raw = bytes(rng.getrandbits(8) for _ in range(n_bytes))
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()


def _hex(rng: random.Random, n: int) -> str:
    return _rand(rng, n, "0123456789abcdef")


def _openai_project(rng: random.Random) -> Sample:
    """The 2024+ project key: ``sk-proj-`` then ~156 characters with ``_`` and ``-`` inside."""
    body = f"{_rand(rng, 74, ALNUM + '_-')}T3BlbkFJ{_rand(rng, 74, ALNUM + '_-')}"
    key = f"sk-proj-{body}"
    text = rng.choice(
        (
            "export OPENAI_API_KEY={k}",
            "client = OpenAI(api_key='{k}')",
            "the notebook calls the API with {k} and fails on quota",
        )
    )
    return Sample(text.format(k=key), key, (body,))


def _anthropic(rng: random.Random) -> Sample:
    body = _rand(rng, 93, ALNUM + "_-") + "AA"
    key = f"sk-ant-api03-{body}"
    text = rng.choice(("ANTHROPIC_API_KEY={k} claude -p hi", 'anthropic.Anthropic(api_key="{k}")', "key {k} hit 429"))
    return Sample(text.format(k=key), key, (body,))


def _aws_secret(rng: random.Random) -> Sample:
    """A secret access key without its key id: 40 characters of base64."""
    secret = _rand(rng, 40, B64)
    text = rng.choice(
        (
            "the secret half is {s}, rotate it after the audit",
            "aws_secret_access_key={s}",
            "AWS secret: {s}",
            "creds.txt: {s}",
        )
    )
    return Sample(text.format(s=secret), secret, (secret,), "aws_secret_access_key")


def _aws_configure(rng: random.Random) -> Sample:
    key_id = "AKIA" + _rand(rng, 16, string.ascii_uppercase + string.digits)
    secret = _rand(rng, 40, B64)
    text = (
        "$ aws configure\n"
        f"AWS Access Key ID [None]: {key_id}\n"
        f"AWS Secret Access Key [None]: {secret}\n"
        "Default region name [None]: eu-west-1\nDefault output format [None]: json"
    )
    if rng.random() < 0.5:
        text = f"$ aws configure get aws_secret_access_key --profile prod\n{secret}\n$ aws s3 ls"
    return Sample(text, secret, (secret,), "aws_secret_access_key")


def _azure_account_key(rng: random.Random) -> Sample:
    key = _b64(rng, 64)
    conn = f"DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey={key};EndpointSuffix=core.windows.net"
    return Sample(f"AZURE_STORAGE_CONNECTION_STRING='{conn}'", key, (key,), "connection_string")


def _strong(rng: random.Random, n: int = 16) -> str:
    """A password of letters, digits and ``!#^*+`` (``_password`` of the old kinds)."""
    return _password(rng, n)


def _password_among(rng: random.Random, templates: tuple[str, ...]) -> Sample:
    """A strong password in one of ``templates`` (its place is ``{p}``)."""
    pw = _strong(rng)
    return Sample(rng.choice(templates).format(p=pw), pw, (pw,), "password")


def _mysql(rng: random.Random) -> Sample:
    return _password_among(
        rng, ("mysql -u root -p{p} -h db.internal prod < dump.sql", "mysqldump -uroot -p{p} shop > shop.sql")
    )


def _docker_login(rng: random.Random) -> Sample:
    pw = _strong(rng, 20)
    return Sample(f"docker login -u deploy -p {pw} registry.acme.io", pw, (pw,), "password")


def _sshpass(rng: random.Random) -> Sample:
    pw = _strong(rng)
    return Sample(f"sshpass -p '{pw}' ssh deploy@10.0.0.5 uptime", pw, (pw,), "password")


def _redis_cli(rng: random.Random) -> Sample:
    pw = _strong(rng, 24)
    return Sample(f"redis-cli -h cache.internal -a {pw} --no-auth-warning ping", pw, (pw,), "password")


def _ldapsearch(rng: random.Random) -> Sample:
    pw = _strong(rng)
    text = f'ldapsearch -x -H ldap://ldap.acme.io -D "cn=admin,dc=acme,dc=io" -w {pw} -b "dc=acme,dc=io"'
    return Sample(text, pw, (pw,), "password")


def _netrc(rng: random.Random) -> Sample:
    pw = _strong(rng, 20)
    if rng.random() < 0.5:
        text = f"$ cat ~/.netrc\nmachine api.heroku.com\n  login jane@acme.io\n  password {pw}\n"
    else:
        text = f"machine git.acme.io login deploy password {pw}"
    return Sample(text, pw, (pw,), "password")


def _pgpass(rng: random.Random) -> Sample:
    pw = _strong(rng, 20)
    text = f"$ cat ~/.pgpass\ndb.internal:5432:prod:app:{pw}\nlocalhost:5432:*:postgres:{pw[::-1]}"
    return Sample(text, pw, (pw, pw[::-1]), "password")


def _kubeconfig(rng: random.Random) -> Sample:
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + _b64(rng, 600) + "\n-----END RSA PRIVATE KEY-----\n"
    data = base64.b64encode(pem.encode()).decode()
    text = (
        "users:\n- name: admin\n  user:\n    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
        f"    client-key-data: {data}\n"
    )
    return Sample(text, data, (data[40:],), "client_key_data")


def _odbc(rng: random.Random) -> Sample:
    pw = _strong(rng)
    text = (
        "Driver={ODBC Driver 18 for SQL Server};Server=tcp:sql.acme.io,1433;Database=billing;"
        f"Uid=app;Pwd={pw};Encrypt=yes;"
    )
    return Sample(text, pw, (pw,), "connection_string")


def _secret_key_base(rng: random.Random) -> Sample:
    value = _hex(rng, 128)
    return Sample(f"SECRET_KEY_BASE={value} bin/rails server", value, (value,), "secret_key_base")


def _db_pw(rng: random.Random) -> Sample:
    pw = _strong(rng)
    return Sample(f"DB_HOST=db.internal DB_USER=app DB_PW={pw} ./run.sh", pw, (pw,), "db_pw")


def _apim(rng: random.Random) -> Sample:
    key = _hex(rng, 32)
    text = f"curl -H 'Ocp-Apim-Subscription-Key: {key}' https://acme.azure-api.net/orders"
    return Sample(text, key, (key,), "subscription_key")


def _discord(rng: random.Random) -> Sample:
    if rng.random() < 0.5:
        token = f"{rng.choice('MN')}{_rand(rng, 23)}.{_rand(rng, 6, ALNUM + '_-')}.{_rand(rng, 27, ALNUM + '_-')}"
        return Sample(f"the bot logs in with client.run('{token}')", token, tuple(token.split(".")[::2]))
    hook = f"{_rand(rng, 18, string.digits)}/{_rand(rng, 68, ALNUM + '_-')}"
    return Sample(f"alerts post to https://discord.com/api/webhooks/{hook}", hook, (hook.split("/")[1],))


def _twilio(rng: random.Random) -> Sample:
    sid, token = "AC" + _hex(rng, 32), _hex(rng, 32)
    key = "SK" + _hex(rng, 32)
    text = rng.choice(
        (
            f"client = Client('{sid}', '{token}')",
            f"curl -u {key}:{token} https://api.twilio.com/2010-04-01/Accounts/{sid}/Messages.json",
        )
    )
    return Sample(text, token, (token,), "auth_token")


def _telegram(rng: random.Random) -> Sample:
    token = f"{rng.randint(10**8, 10**10 - 1)}:AA{_rand(rng, 33, ALNUM + '_-')}"
    text = rng.choice(("curl https://api.telegram.org/bot{t}/getUpdates", "TELEGRAM bot {t} answers /start"))
    return Sample(text.format(t=token), token, (token.split(":")[1],))


def _vault(rng: random.Random) -> Sample:
    token = "hvs." + _rand(rng, 91, ALNUM + "_-")
    return Sample(f"vault login {token}", token, (token[4:],), "vault_token")


def _age(rng: random.Random) -> Sample:
    key = "AGE-SECRET-KEY-1" + _rand(rng, 58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
    return Sample(f"# created: 2024-01-15\n# public key: age1{_rand(rng, 58).lower()}\n{key}", key, (key[16:],))


def _mailgun(rng: random.Random) -> Sample:
    key = "key-" + _hex(rng, 32) if rng.random() < 0.5 else f"{_hex(rng, 32)}-{_hex(rng, 8)}-{_hex(rng, 8)}"
    text = f"curl -s --user 'api:{key}' https://api.mailgun.net/v3/mg.acme.io/messages"
    if rng.random() < 0.5:
        text = f"mailgun.Client(auth=('api', '{key}'))"
    return Sample(text, key, (key.removeprefix("key-")[:32],))


def _fernet(rng: random.Random) -> Sample:
    key = _b64(rng, 32, urlsafe=True)
    text = rng.choice(("f = Fernet(b'{k}')", "the backup is encrypted with Fernet key {k}", "FERNET_KEY={k}"))
    return Sample(text.format(k=key), key, (key[:-1],), "fernet_key")


def _session_cookie(rng: random.Random) -> Sample:
    sid = _rand(rng, 32, string.ascii_lowercase + string.digits)
    text = rng.choice(
        (
            "curl -b 'sessionid={s}; csrftoken=abc' https://admin.acme.io/",
            "document.cookie shows sessionid={s}",
            "requests.get(url, cookies={{'sessionid': '{s}'}})",
        )
    )
    return Sample(text.format(s=sid), sid, (sid,), "sessionid")


_LANGUAGES = (
    ("contraseña", "la contraseña: {p}"),
    ("contraseña", "contraseña={p}"),
    ("Passwort", "Passwort: {p}"),
    ("Passwort", "das Passwort ist {p}"),
    ("пароль", "пароль: {p}"),
    ("пароль", "логин admin, пароль {p}"),
    ("密码", "密码\uff1a{p}"),  # a full-width colon
    ("密码", "用户名 admin 密码 {p}"),
    ("mot de passe", "mot de passe : {p}"),
    ("mot de passe", "le mot de passe est {p}"),
)


def _password_in(word: str) -> Callable[[random.Random], Sample]:
    forms = [form for w, form in _LANGUAGES if w == word]

    def make(rng: random.Random) -> Sample:
        pw = _strong(rng)
        return Sample(rng.choice(forms).format(p=pw), pw, (pw,), "password")

    return make


def _mongo_slash(rng: random.Random) -> Sample:
    pw = f"{_rand(rng, 6)}/{_rand(rng, 6)}/{_rand(rng, 6)}"
    uri = f"mongodb+srv://app:{pw}@cluster0.ab1cd.mongodb.net/prod?retryWrites=true"
    return Sample(f"MONGO_URL is {uri}", uri, (*pw.split("/"), pw), "dsn")


def _pem_body(rng: random.Random) -> Sample:
    """Key lines without their BEGIN line (a ``tail`` or a copy from the middle of a file)."""
    lines = [_rand(rng, 64, B64) for _ in range(10)] + [_rand(rng, 24, B64) + "=="]
    text = "$ tail -n 12 ~/.ssh/deploy_key\n" + "\n".join(lines)
    if rng.random() < 0.5:
        text += "\n-----END RSA PRIVATE KEY-----"
    return Sample(text, "\n".join(lines), tuple(lines))


def _putty(rng: random.Random) -> Sample:
    lines = [_rand(rng, 64, B64) for _ in range(6)] + [_rand(rng, 20, B64) + "="]
    mac = _hex(rng, 64)
    text = "Private-Lines: 7\n" + "\n".join(lines) + f"\nPrivate-MAC: {mac}"
    return Sample(text, "\n".join(lines), (*lines, mac))


def _xml_password(rng: random.Random) -> Sample:
    pw = _strong(rng)
    tag = rng.choice(("password", "Password", "apiKey", "secret"))
    return Sample(f"<server>\n  <id>nexus</id>\n  <{tag}>{pw}</{tag}>\n</server>", pw, (pw,), "password")


def _yaml_block(rng: random.Random) -> Sample:
    a, b = _strong(rng, 20), _strong(rng, 20)
    text = f"db:\n  user: app\n  password: |\n    {a}\n    {b}\n  host: db.internal\n"
    return Sample(text, a, (a, b), "password")


def _yaml_list(rng: random.Random) -> Sample:
    values = [_strong(rng, 20) for _ in range(3)]
    text = "deploy:\n  secrets:\n" + "".join(f"    - {v}\n" for v in values) + "  region: eu-west-1\n"
    return Sample(text, values[0], tuple(values), "secrets")


def _url_encoded(rng: random.Random) -> Sample:
    pw = _strong(rng)
    encoded = pw.replace("!", "%21").replace("#", "%23").replace("^", "%5E").replace("*", "%2A").replace("+", "%2B")
    text = f"POST /login body=user%3Djane%26password%3D{encoded}%26remember%3D1"
    pieces = tuple(p for p in re.split(r"%[0-9A-F]{2}", encoded) if len(p) >= 8) or (encoded,)
    return Sample(text, encoded, pieces, "password")


def _numbered_key(rng: random.Random) -> Sample:
    """A key read in parts with line numbers (``cat -n``, ``grep -n``): 14 lines, none with BEGIN."""
    lines = [_rand(rng, 70, B64) for _ in range(13)] + [_rand(rng, 30, B64) + "="]
    if rng.random() < 0.5:
        shown = "\n".join(f"{i + 2:6}\t{line}" for i, line in enumerate(lines))
        text = f"$ cat -n id_ed25519 | sed -n 2,15p\n{shown}"
    else:
        shown = "\n".join(f"{i + 2}:{line}" for i, line in enumerate(lines))
        text = f"$ grep -n . id_ed25519 | head -15 | tail -14\n{shown}"
    return Sample(text, "\n".join(lines), tuple(lines))


#: The kinds added for issue 32 (their names as the issue lists them).
ISSUE_32_KINDS: dict[str, Callable[[random.Random], Sample]] = {
    "openai_sk_proj": _openai_project,
    "anthropic_sk_ant": _anthropic,
    "aws_secret_alone": _aws_secret,
    "aws_configure": _aws_configure,
    "azure_account_key": _azure_account_key,
    "mysql_p": _mysql,
    "docker_login_p": _docker_login,
    "sshpass_p": _sshpass,
    "redis_cli_a": _redis_cli,
    "ldapsearch_w": _ldapsearch,
    "netrc": _netrc,
    "pgpass": _pgpass,
    "kube_client_key_data": _kubeconfig,
    "odbc_pwd": _odbc,
    "secret_key_base": _secret_key_base,
    "db_pw": _db_pw,
    "ocp_apim_key": _apim,
    "discord": _discord,
    "twilio": _twilio,
    "telegram": _telegram,
    "vault_hvs": _vault,
    "age_secret_key": _age,
    "mailgun": _mailgun,
    "fernet": _fernet,
    "sessionid_cookie": _session_cookie,
    "pw_contrasena": _password_in("contraseña"),
    "pw_passwort": _password_in("Passwort"),
    "pw_parol": _password_in("пароль"),
    "pw_mima": _password_in("密码"),
    "pw_mot_de_passe": _password_in("mot de passe"),
    "mongo_slash_password": _mongo_slash,
    "pem_without_begin": _pem_body,
    "putty_key_lines": _putty,
    "xml_password": _xml_password,
    "yaml_password_block": _yaml_block,
    "yaml_secrets_list": _yaml_list,
    "url_encoded_password": _url_encoded,
    "key_lines_numbered": _numbered_key,
}


# -- the kinds session 34's probe found leaking: no rule names them --------------------------------


def _key_after_any_name(rng: random.Random) -> Sample:
    """A random key assigned to a name that sounds like nothing (the backstop never looked past "=")."""
    key = _rand(rng, rng.randint(24, 48))
    while not (any(c.isdigit() for c in key) and any(c.isupper() for c in key) and any(c.islower() for c in key)):
        key = _rand(rng, len(key))
    name = "_".join(w.upper() for w in rng.sample([w for w in WORDS if w != "token"], rng.randint(1, 4)))
    text = rng.choice(("{n}={k}", "export {n}={k}", "{n}={k} ./run.sh", "  - {n}={k}"))
    return Sample(text.format(n=name, k=key), key, (key,))


def _dotted_token(rng: random.Random) -> Sample:
    key = _rand(rng, 40, string.ascii_letters + string.digits)
    token = f"dp.{rng.choice(('st', 'ct', 'sa', 'pt'))}.{rng.choice(('dev', 'stg', 'prd'))}.{key}"
    text = rng.choice(("DOPPLER_TOKEN={t}", "doppler token {t}", "doppler setup --token {t}", "use {t} in CI"))
    return Sample(text.format(t=token), token, (key,))


def _token_with_equals(rng: random.Random) -> Sample:
    token = "ATATT3xFfGF0" + _rand(rng, 180, ALNUM + "-_") + "=" + _hex(rng, 8).upper()
    text = rng.choice(("jira token {t}", "JIRA_API_TOKEN={t}", "curl -u me@acme.io:{t} https://acme.atlassian.net"))
    return Sample(text.format(t=token), token, (token[12:190],))


def _cli_password_more(rng: random.Random) -> Sample:
    return _password_among(
        rng,
        (
            "gpg --batch --passphrase {p} -d secrets.gpg",
            "openssl pkcs12 -export -in c.pem -passout pass:{p} -out c.p12",
            "keytool -importkeystore -srckeystore a.p12 -srcstorepass {p} -deststorepass {p}",
            "zip -P {p} -r backup.zip data/",
            "7z a -p{p} backup.7z data/",
            "htpasswd -bc /etc/nginx/.htpasswd admin {p}",
            "net user deploy {p} /add",
            "$pw = ConvertTo-SecureString '{p}' -AsPlainText -Force",
            "nmcli dev wifi connect Office password {p}",
            "wpa_passphrase Office {p} > /etc/wpa.conf",
            "mongosh -u admin -p {p} --authenticationDatabase admin",
            "ssh-keygen -t ed25519 -N '{p}' -f ~/.ssh/deploy",
            "useradd -m -p $(openssl passwd -6 {p}) deploy",
            "rabbitmqctl add_user admin {p}",
            "smbclient //nas/share -U bob%{p}",
            "xfreerdp /u:admin /p:{p} /v:10.0.0.5",
            "echo 'deploy:{p}' | sudo chpasswd",
            "echo {p} | passwd --stdin deploy",
            "CREATE USER app WITH PASSWORD '{p}';",
            "CREATE USER 'app'@'%' IDENTIFIED BY '{p}';",
            "I set the password to {p}",
            '{{"db": {{"user": "app", "pass": "{p}"}}}}',
            "use {p} as the password",
            "sqlplus scott/{p}@orcl",
            "lftp -u backup,{p} ftp.example.com",
            "sqlcmd -S db -U sa -P {p} -Q 'select 1'",
            "az login -u bob@example.com -p {p}",
        ),
    )


def _login_and_prose(rng: random.Random) -> Sample:
    return _password_among(
        rng,
        (
            "login: admin / {p}",
            "the router login is admin/{p} until we change it",
            "credentials deploy:{p} for the staging box",
            "sign in as alice / {p} to see the dashboard",
            "Creds: svc_backup / {p}",
            "user: deploy pass: {p}",
            "the wifi key is {p}",
            "set DB_PASS to {p} before starting",
            "my login is jdoe and my password's {p}",
            "the admin password for grafana is still {p} on staging",
        ),
    )


def _chat_webhook(rng: random.Random) -> Sample:
    if rng.random() < 0.5:
        tenant, group, connector = (str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3))
        secret = _hex(rng, 32)
        path = f"{group}@{tenant}/IncomingWebhook/{secret}/{connector}"
        text = f"the build posts to https://acme.webhook.office.com/webhookb2/{path} when it fails"
        return Sample(text, path, (secret, connector))
    hook = f"{_rand(rng, 7, string.digits)}/{_rand(rng, 7, string.ascii_lowercase + string.digits)}"
    return Sample(f"new leads go to https://hooks.zapier.com/hooks/catch/{hook}/", hook, (hook,))


def _piped_and_prose(rng: random.Random) -> Sample:
    return _password_among(
        rng,
        (
            "echo {p} | sudo -S apt-get update",
            "printf '%s' '{p}' | docker login --username ci --password-stdin ghcr.io",
            "echo {p} | kinit admin@EXAMPLE.COM",
            "psexec \\\\build01 -u acme\\admin -p {p} cmd /c whoami",
            "net use \\\\nas\\share /user:acme\\deploy {p}",
            "ssh in as root, the password there is {p}",
            "gcloud auth login  # password {p}",
            "WiFi: AcmeGuest / {p}",
            "VPN creds are deploy and {p}",
            "la password è {p}",
            "hasło to {p}",
            "şifre: {p}",
            "비밀번호는 {p}",
            "lösenordet är {p}",
            "mdp : {p}",
            "smtp user is bob, pass is {p}",
            "./backup.sh -u bob -p {p} --all",
            "env:\n  - name: DB_PASSWORD\n    value: {p}",
            "gh secret set DB_PASSWORD --body {p}",
            "aws ssm put-parameter --name /app/db --value {p} --type SecureString",
            "aws secretsmanager create-secret --name db --secret-string {p}",
            "az keyvault secret set --vault-name kv --name db --value {p}",
            "echo -n {p} | gcloud secrets create db --data-file=-",
            "redis> AUTH default {p}",
            "USER bob\nPASS {p}\n",
            "a1 LOGIN bob {p}",
            "set -gx DB_PASSWORD {p}",
            "setenv DB_PASSWORD {p}",
            "ENV DB_PASSWORD {p}",
            "os.environ.get('DB_PASSWORD', '{p}')",
            "define('DB_PASSWORD', '{p}');",
            'ds.setPassword("{p}");',
            "requests.get(url, auth=('bob', '{p}'))",
            'var cred = new NetworkCredential("bob", "{p}");',
            "http -a bob:{p} api.example.com",
            "CONNECT bob/{p}@orcl",
            "SET PASSWORD FOR 'bob'@'%' = PASSWORD('{p}');",
            'passphrase "{p}"',
        ),
    )


def _stdin_and_recovery(rng: random.Random) -> Sample:
    return _password_among(
        rng,
        (
            "sudo -S apt-get update <<< '{p}'",
            "sudo -S systemctl restart nginx <<EOF\n{p}\nEOF",
            "passwd <<EOF\n{p}\n{p}\nEOF",
            "chpasswd <<< 'deploy:{p}'",
            "sudo chpasswd <<EOF\ndeploy:{p}\nEOF",
            "smbpasswd -s -a bob <<EOF\n{p}\n{p}\nEOF",
            "kinit bob@EXAMPLE.COM <<< '{p}'",
            "cryptsetup open /dev/sdb1 vault <<< '{p}'",
            "gpg --batch --passphrase-fd 0 -d vault.gpg <<< '{p}'",
            "htpasswd -i /etc/nginx/.htpasswd admin <<< '{p}'",
            "echo 'backup:{p}' > /etc/rsyncd.secrets",
            "cat > /etc/rsyncd.secrets <<EOF\nbackup:{p}\nEOF",
            "cat /etc/rsyncd.secrets\nbackup:{p}",
            'expect "Password:"\nsend "{p}\\r"',
            'expect "password:" {{ send "{p}\\r" }}',
            "prompt: 'password:' '{p}'",
            "passcode: {p}",
            "security question answer: {p}",
            "the answer to my security question is {p}",
        ),
    )


def _service_config(rng: random.Random) -> Sample:
    if rng.randrange(12) == 0:
        key = "-".join(_rand(rng, 6, string.digits) for _ in range(8))
        return Sample(f"BitLocker recovery key: {key}", key, (key,))
    return _password_among(
        rng,
        (
            "requirepass {p}",
            "masterauth {p}",
            "authentication {{\n    auth_type PASS\n    auth_pass {p}\n}}",
            'key "transfer" {{\n  algorithm hmac-sha256;\n  secret "{p}";\n}};',
            '10.0.0.1 10.0.0.2 : PSK "{p}"',
            'network={{\n  ssid="Acme"\n  psk="{p}"\n}}',
            "rpcpassword {p}",
            "schtasks /create /tn backup /tr backup.bat /sc daily /ru acme\\svc /rp {p}",
            "mosquitto_pub -h broker -u bob -P {p} -t sensors -m 1",
            "snmpwalk -v2c -c {p} 10.0.0.1",
            "mc alias set minio http://localhost:9000 admin {p}",
            "rclone config create s3 s3 access_key_id AKIAIOSFODNN7EXAMPLE secret_access_key {p}",
            "sshpass -f <(printf '%s\\n' {p}) ssh-copy-id bob@host",
            "ansible-vault decrypt secrets.yml --vault-password-file <(echo {p})",
            "echo {p} | vncpasswd -f > ~/.vnc/passwd",
            "the pre-shared key is {p}",
            "phone unlock code: {p}",
            "npm config set //registry.npmjs.org/:_authToken {p}",
            "yarn config set npmAuthToken {p}",
            "aws configure set aws_secret_access_key {p}",
            "git config --global github.token {p}",
            'dotnet user-secrets set "Db:Password" "{p}"',
            "poetry config http-basic.acme bob {p}",
            "security add-generic-password -a bob -s deploy -w {p}",
            "java -jar jenkins-cli.jar -s http://ci:8080 -auth admin:{p} build deploy",
            "bw unlock {p}",
            "echo {p} | op signin",
            "echo {p} | pass insert -e email/work",
            "mysql_config_editor set --login-path=prod --user=bob --password <<< {p}",
            'expect -c \'spawn ssh bob@h; expect "password:"; send "{p}\\r"; interact\'',
        ),
    )


def _more_vendor_tokens(rng: random.Random) -> Sample:
    alnum = string.ascii_letters + string.digits
    kind = rng.randrange(7)
    if kind == 0:
        token = "sbp_" + _hex(rng, 40)
    elif kind == 1:
        token = "pplx-" + _hex(rng, 48)
    elif kind == 2:
        token = "fw_" + _rand(rng, 24, alnum)
    elif kind == 3:
        token = f"lsv2_{rng.choice(('pt', 'sk'))}_{_hex(rng, 32)}_{_hex(rng, 10)}"
    elif kind == 4:
        token = "glrt-" + _rand(rng, 20, alnum)
    elif kind == 5:
        token = f"{_rand(rng, 3, alnum)}8Q~{_rand(rng, 31, alnum)}"
    else:
        token = _hex(rng, 40)
        return Sample(f"wandb login {token}", token, (token,))
    text = rng.choice(("{t}", "export TOKEN_FOR_CI={t}", "the key is {t}", "use {t} in the pipeline")).format(t=token)
    return Sample(text, token, (token,))


def _iban(rng: random.Random) -> str:
    """A German IBAN whose check digits hold."""
    bban = "".join(rng.choice(string.digits) for _ in range(18))
    moved = bban + "131400"  # D=13, E=14, check digits 00
    check = 98 - int(moved) % 97
    return f"DE{check:02d}{bban}"


def _personal_numbers(rng: random.Random) -> Sample:
    kind = rng.randrange(6)
    if kind == 0:
        value = f"{rng.randrange(100, 899)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}"
        text = rng.choice(("my SSN is {v}", "social security number: {v}", "SSN {v} on the form"))
    elif kind == 1:
        value = _iban(rng)
        if rng.random() < 0.5:
            value = " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        text = rng.choice(("IBAN {v}", "please wire the invoice to {v}", "Bank: Acme, IBAN: {v}, BIC: ACMEDEFF"))
    elif kind == 2:
        value = str(rng.randrange(100, 9999))
        text = rng.choice(("exp 12/27 cvv {v}", "the CVV is {v}", "card security code: {v}"))
    elif kind == 3:
        value = "".join(rng.choice(string.digits) for _ in range(rng.randrange(8, 14)))
        text = rng.choice(("account number {v}", "bank account no. {v}", "acct # {v} at the credit union"))
    elif kind == 4:
        value = "".join(rng.choice(string.digits) for _ in range(9))
        text = rng.choice(("routing number {v}", "ABA {v}"))
    else:
        value = rng.choice(string.ascii_uppercase) + "".join(rng.choice(string.digits) for _ in range(8))
        text = rng.choice(("passport number {v}", "my passport no. is {v}"))
    return Sample(text.format(v=value), value, (value,))


#: Words of a wallet's seed phrase (a few of BIP-39's 2,048).
SEED_WORDS = (
    "abandon", "ability", "able", "about", "above", "absent", "absorb", "abstract", "absurd", "abuse", "access",
    "accident", "account", "accuse", "achieve", "acid", "acoustic", "acquire", "across", "action", "actor",
    "actress", "actual", "adapt", "address", "adjust", "admit", "adult", "advance", "advice", "aerobic", "affair",
    "afford", "afraid", "again", "agent", "agree", "ahead", "aim", "air", "airport", "aisle", "alarm", "album",
    "alcohol", "alert", "alien", "allow", "almost", "alone", "alpha", "already", "also", "alter", "always",
    "amateur", "amazing", "among", "amount",
)  # fmt: skip


def _two_factor(rng: random.Random) -> Sample:
    kind = rng.randrange(7)
    if kind == 0:
        seed = _rand(rng, rng.choice((16, 32)), string.ascii_uppercase + "234567")
        text = rng.choice(("2FA seed {s}", "totp secret: {s}", "the authenticator key is {s}")).format(s=seed)
        return Sample(text, seed, (seed,))
    if kind == 1:
        codes = [
            f"{_rand(rng, 4, string.ascii_lowercase + string.digits)}-{_rand(rng, 4, string.digits)}"
            for _ in range(rng.randrange(4, 10))
        ]
        return Sample(f"backup codes: {' '.join(codes)}", " ".join(codes), tuple(codes))
    if kind == 2:
        pw = " ".join(_rand(rng, 4, string.ascii_lowercase) for _ in range(4))
        return Sample(f"gmail app password: {pw}", pw, (pw,))
    if kind == 3:
        phrase = " ".join(rng.choice(SEED_WORDS) for _ in range(rng.choice((12, 24))))
        return Sample(f"recovery phrase: {phrase}", phrase, (phrase,))
    if kind == 4:
        token = "pul-" + _hex(rng, 40)
        return Sample(f"PULUMI_ACCESS_TOKEN is {token}", token, (token,))
    if kind == 5:
        token = "NRAK-" + _rand(rng, 27, string.ascii_uppercase + string.digits)
        return Sample(f"use {token} for the New Relic API", token, (token,))
    token = _hex(rng, 32)
    return Sample(f"twilio auth token {token}", token, (token,))


#: The kinds added in session 34 (and login_and_prose, chat_webhook, session 35; piped_and_prose,
#: two_factor, session 36; stdin_and_recovery, service_config, more_vendor_tokens, personal_numbers,
#: session 37).
UNLISTED_KINDS: dict[str, Callable[[random.Random], Sample]] = {
    "key_after_any_name": _key_after_any_name,
    "dotted_token": _dotted_token,
    "token_with_equals": _token_with_equals,
    "cli_password_more": _cli_password_more,
    "login_and_prose": _login_and_prose,
    "chat_webhook": _chat_webhook,
    "piped_and_prose": _piped_and_prose,
    "two_factor": _two_factor,
    "stdin_and_recovery": _stdin_and_recovery,
    "service_config": _service_config,
    "more_vendor_tokens": _more_vendor_tokens,
    "personal_numbers": _personal_numbers,
}


# -- ordinary developer text: what redaction must leave alone ----------------------------------------

FIXTURE = HERE.parent / "tests" / "fixtures" / "ordinary_developer_text.md"
STDLIB_MODULES = (
    "argparse", "json/decoder", "logging/handlers", "pathlib", "subprocess", "dataclasses", "textwrap",
    "shutil", "tarfile", "http/client", "urllib/parse", "smtplib", "ftplib", "base64", "hashlib", "imaplib",
    "sqlite3/__init__", "uuid", "secrets", "getpass",
)  # fmt: skip
WORDS = (
    "memory", "store", "session", "hook", "capture", "retry", "backoff", "index", "catalog", "vector", "search",
    "token", "count", "limit", "window", "deploy", "build", "cache", "spool", "drain", "handler", "request",
)  # fmt: skip


def _code_texts() -> Iterator[tuple[str, str]]:
    import sysconfig

    lib = Path(sysconfig.get_paths()["stdlib"])
    for name in STDLIB_MODULES:
        path = lib / f"{name}.py"
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i in range(0, min(len(lines), 400), 10):
            block = "\n".join(lines[i : i + 10]).strip()
            if block:
                yield "code", block


def _prose_texts(limit: int = 600) -> Iterator[tuple[str, str]]:
    data = HERE.parent.parent / "shared" / "data" / "locomo_dev.json"
    if not data.is_file():
        return
    conversations = json.loads(data.read_text())
    n = 0
    for conversation in conversations:
        sessions = conversation.get("conversation", {})
        for key, turns in sessions.items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            for turn in turns:
                if isinstance(turn, dict) and turn.get("text"):
                    yield "prose", str(turn["text"])
                    n += 1
                    if n >= limit:
                        return


def _git_texts() -> Iterator[tuple[str, str]]:
    done = subprocess.run(
        ["git", "-C", str(HERE.parent), "log", "-n", "150", "--stat", "--format=commit %H%nAuthor: %an%n%n%B"],
        capture_output=True,
        text=True,
        check=False,
    )
    for block in re.split(r"\n(?=commit [0-9a-f]{40}\n)", done.stdout):
        if block.strip():
            yield "git", block.strip()[:4000]


def _generated_texts(rng: random.Random) -> Iterator[tuple[str, str]]:
    import uuid

    for i in range(150):
        rid = uuid.UUID(int=rng.getrandbits(128))
        yield (
            "logs",
            (
                f"2024-01-15T12:{i % 60:02d}:45.{rng.randint(0, 999999):06d}Z INFO [worker-{i % 8}] request_id={rid} "
                f"GET /api/v1/items/{rng.randint(1, 99999)} 200 {rng.random() * 90:.1f}ms uid={rng.randint(1, 9999)} "
                f"ip=10.0.{i % 255}.{rng.randint(1, 254)} trace={_rand(rng, 32, '0123456789abcdef')}"
            ),
        )
        yield (
            "logs",
            (
                'Traceback (most recent call last):\n  File "/srv/app/worker.py", line 212, in run\n'
                f"    result = self.handler(job_{i})\nTimeoutError: job {rid} exceeded 30s (attempt {i % 5}/5)"
            ),
        )
    for _ in range(100):
        sha1, sha256 = _rand(rng, 40, "0123456789abcdef"), _rand(rng, 64, "0123456789abcdef")
        yield "hashes", f"{sha256}  dist/remindful-0.{rng.randint(1, 40)}.0-py3-none-any.whl"
        yield "hashes", f"HEAD is now at {sha1[:7]} fix: keep {sha1} as the merge base"
        yield "hashes", f"docker pull ghcr.io/acme/api@sha256:{sha256}"
        digest = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(64))).decode()
        yield "hashes", f'"integrity": "sha512-{digest}",'
    for _ in range(100):
        ids = ", ".join(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3))
        yield "uuids", f"deleted memories {ids} from session {uuid.UUID(int=rng.getrandbits(128))}"
        yield "uuids", f"knowledge_2024{rng.randint(10**15, 10**16 - 1)}_{_rand(rng, 8, '0123456789abcdef')} stored"
    for i in range(60):
        raw = b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(rng.randint(200, 3000)))
        data = base64.b64encode(raw).decode()
        yield "base64_images", f"![diagram {i}](data:image/png;base64,{data})"
        yield "base64_images", f'<img alt="chart" src="data:image/png;base64,{data}">'
    for _ in range(150):
        words = rng.sample(WORDS, 6)
        yield "identifiers", "_".join(words) + f"_{rng.randint(2, 99)} = " + "".join(w.title() for w in words) + "()"
        settings = [w for w in words if w != "token"][:4]  # FOO__TOKEN=114 would read as a token's value
        yield "identifiers", "REMINDFUL_" + "__".join(w.upper() for w in settings) + f"={rng.randint(1, 600)}"
        yield "identifiers", f"tests/test_{'_'.join(words[:4])}.py::test_{'_'.join(words[2:])}"


def ordinary_texts(seed: int = 32) -> list[tuple[str, str]]:
    """(category, text) of ordinary developer text: the fixture's lines, stdlib code in blocks of ten
    lines, LoCoMo turns (prose), this repository's git log, and generated logs, hashes, UUIDs, base64
    images and long identifiers."""
    rng = random.Random(seed)
    fixture = [("fixture", line) for line in FIXTURE.read_text().splitlines()[1:] if line.strip()]
    return [
        *fixture,
        *_code_texts(),
        *_prose_texts(),
        *_git_texts(),
        *_generated_texts(rng),
    ]


#: Every kind, in the order they are printed (the canary last).
KINDS: dict[str, Callable[[random.Random], Sample]] = {
    **{k: v for k, v in BASE_KINDS.items() if k != CANARY},
    **ISSUE_32_KINDS,
    **UNLISTED_KINDS,
    CANARY: _canary,
}


# -- the measure --------------------------------------------------------------------------------------


def leaks(sample: Sample, written: str) -> bool:
    """Whether any piece of ``sample``'s secret survives in ``written`` (the matrix's rule)."""
    if sample.digits:
        digits = re.sub(r"\D", "", written)
        return any(
            re.sub(r"\D", "", p)[i : i + CARD_WINDOW] in digits
            for p in sample.pieces
            for i in range(len(re.sub(r"\D", "", p)) - CARD_WINDOW + 1)
        )
    low = written.lower()
    return any(p.lower()[i : i + WINDOW] in low for p in sample.pieces for i in range(len(p) - WINDOW + 1))


def detection(redact: Callable[[str], str], n: int, seed: int = 32) -> dict[str, tuple[int, int]]:
    """{kind: (leaked, samples)} over ``n`` samples of each kind (the canary left out)."""
    out = {}
    for kind, make in KINDS.items():
        if kind == CANARY:
            continue
        leaked = 0
        for i in range(n):
            sample = make(random.Random(f"{seed}:{kind}:{i}"))
            leaked += leaks(sample, redact(sample.text))
        out[kind] = (leaked, n)
    return out


def false_redaction(redact: Callable[[str], str], texts: list[tuple[str, str]]) -> dict[str, Any]:
    """{category: [changed, total]} and up to 20 changed examples (before -> after)."""
    by: dict[str, list[int]] = {}
    examples: list[str] = []
    for category, text in texts:
        after = redact(text)
        counts = by.setdefault(category, [0, 0])
        counts[1] += 1
        if after != text:
            counts[0] += 1
            if len(examples) < 20:
                examples.append(f"[{category}] {_diff(text, after)}")
    return {"by_category": by, "examples": examples}


def _diff(before: str, after: str) -> str:
    start = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), 0)
    return f"...{before[max(0, start - 30) : start + 50]!r} -> {after[max(0, start - 30) : start + 50]!r}"


def redactors() -> dict[str, Callable[[str], str]]:
    """The hook's fast rules and the store's full pass, as :mod:`remindful.engine.redact` builds them."""
    from remindful.engine.redact import build_redactor

    hook, store = build_redactor(), build_redactor(library=True)
    assert hook is not None and store is not None
    return {"hook": hook.redact, "store": store.redact}


def import_seconds(code: str, runs: int = 5) -> float:
    """The median wall time of ``python -c code`` over ``runs`` runs."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - began)
    return sorted(times)[len(times) // 2]


#: Hostile texts: one head of a rule (these, and every kind's samples without their secret)
#: repeated to about 200 KB with no end that completes it (a build log or a pasted file made to
#: stall a hook, whose prompt has 2 s, or a store's writes), through both redactors; beside the same
#: length of ordinary texts.
HOSTILE_HEADS = (
    "sudo -x ", "sudo -S x <<< '", "passwd <<EOF\n", '"passwd <<EOF\\n', "cat secrets ", "cat > secrets.txt ",
    "echo a ", "echo 'a:b", "--password-file <(echo ", 'expect "password: ', 'expect "pass" ',
    "security question answer ", "mother's maiden name ", "git config --global ", "npm config set a ", 'secret "',
    ": PSK ", "requirepass ", '"password:" ', "ABCDE-", "IBAN DE89 ", "account number 1 ", "license key is ",
    "$1$", "snmpwalk -c ", "password=", "--password ", "the password is ", "login: a / ", "echo x | ",
    "https://u:", "Authorization: Basic ", "-----BEGIN PRIVATE KEY-----\n", "AKIA", "ghp_", "sk-", "eyJ",
)  # fmt: skip
HOSTILE_CHARS = 200_000


def hostile_heads(seed: int) -> list[str]:
    """:data:`HOSTILE_HEADS`, and of three samples of every kind the text without its secret (as it
    is, with a space after it, and with its lines joined)."""
    rng = random.Random(seed)
    heads = list(HOSTILE_HEADS)
    for make in KINDS.values():
        for _ in range(3):
            sample = make(rng)
            head = sample.text.replace(sample.bare, "")
            if head.strip():
                heads += [head, head + " ", head.replace("\n", " ")]
    return list(dict.fromkeys(heads))


def hostile(redact: Any, ordinary: str, heads: list[str]) -> dict[str, Any]:
    """The slowest of ``heads`` repeated to :data:`HOSTILE_CHARS` (ms) and its head, beside
    ``ordinary`` text of that length."""
    from common import elapsed_ms

    times = {head: round(elapsed_ms(redact, head * (HOSTILE_CHARS // len(head))), 1) for head in heads}
    slowest = max(times, key=lambda h: times[h])
    return {
        "heads": len(times),
        "ordinary_ms": round(elapsed_ms(redact, ordinary), 1),
        "slowest_ms": times[slowest],
        "slowest_head": slowest[:60],
    }


def run(n: int = 200, seed: int = 32) -> dict[str, Any]:
    texts = ordinary_texts(seed)
    result: dict[str, Any] = {"samples_per_kind": n, "ordinary_texts": len(texts)}
    for name, redact in redactors().items():
        began = time.perf_counter()
        found = detection(redact, n, seed)
        secret_s = time.perf_counter() - began
        began = time.perf_counter()
        ordinary = false_redaction(redact, texts)
        ordinary_s = time.perf_counter() - began
        changed = sum(c for c, _ in ordinary["by_category"].values())
        result[name] = {
            "leaked_samples": sum(leaked for leaked, _ in found.values()),
            "samples": sum(total for _, total in found.values()),
            "leaking_kinds": {k: v for k, v in found.items() if v[0]},
            "ordinary_changed": changed,
            "ordinary_changed_pct": round(100 * changed / max(1, len(texts)), 2),
            **ordinary,
            "us_per_secret_text": round(1e6 * secret_s / max(1, n * len(found)), 1),
            "us_per_ordinary_text": round(1e6 * ordinary_s / max(1, len(texts)), 1),
        }
    ordinary = "\n".join(text for _, text in texts)
    ordinary = (ordinary * (HOSTILE_CHARS // max(1, len(ordinary)) + 1))[:HOSTILE_CHARS]
    heads = hostile_heads(seed)
    result["hostile"] = {name: hostile(redact, ordinary, heads) for name, redact in redactors().items()}
    result["startup_s"] = {
        "python -c pass": round(import_seconds("pass"), 4),
        "import remindful.engine.redact (hook rules)": round(import_seconds("import remindful.engine.redact"), 4),
        "+ the detect-secrets plugins": round(
            import_seconds("import remindful.engine.redact as r; r.build_redactor(library=True).redact('x')"),
            4,
        ),
    }
    return result


def lines(result: dict[str, Any]) -> Iterator[str]:
    yield f"{len(KINDS) - 1} kinds x {result['samples_per_kind']} samples; {result['ordinary_texts']} ordinary texts"
    for name in ("hook", "store"):
        r = result[name]
        yield (
            f"{name}: {r['leaked_samples']} of {r['samples']} samples leaked; "
            f"ordinary texts changed {r['ordinary_changed']} ({r['ordinary_changed_pct']} %); "
            f"{r['us_per_secret_text']} us per secret text, {r['us_per_ordinary_text']} us per ordinary text"
        )
        for kind, (leaked, total) in r["leaking_kinds"].items():
            yield f"  leaks {kind}: {leaked}/{total}"
        yield "  changed by category: " + ", ".join(f"{c} {a}/{b}" for c, (a, b) in r["by_category"].items())
        for example in r["examples"][:10]:
            yield f"  changed {example}"
    for name, h in result["hostile"].items():
        yield (
            f"hostile texts of {HOSTILE_CHARS:,} characters (a rule's head repeated, {h['heads']} heads), {name}: "
            f"slowest {h['slowest_ms']} ms ({h['slowest_head']!r}); ordinary texts of that length {h['ordinary_ms']} ms"
        )
    yield "startup (median of 5, seconds): " + ", ".join(f"{k} {v}" for k, v in result["startup_s"].items())


def main(argv: list[str] | None = None) -> int:
    sys.path.append(str(HERE))
    from common import emit, machine, parser

    args_parser = parser(__doc__)
    args_parser.add_argument("--samples", type=int, default=200, help="samples of each kind")
    args_parser.add_argument("--seed", type=int, default=32)
    args = args_parser.parse_args(argv)
    result = run(args.samples, args.seed)
    result["machine"] = machine()
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
