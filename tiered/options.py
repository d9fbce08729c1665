"""Validated ``rsm.config.*`` values, and keeping secrets out of messages.

:class:`Options` reads a plugin's configuration (the ``rsm.config.`` keys with the prefix stripped): every value is
checked, and a bad one raises :class:`tiered.errors.RemoteConfigError` naming the full key, the value and the
allowed range, as the broker keys do (``Invalid value abc for configuration rsm.config.max_attempts: expected a
whole number in 1..100``).

Secrets never appear in messages, logs or reprs: the value of a secret key (one whose name holds ``secret``,
``password``, ``token``, ``key_id``, ``access_key``, ``credential``... or is ``key``) is shown as ``[hidden]``;
the userinfo of a URL (``http://user:PASS@host``) is shown as ``***``; and :class:`Redactor` replaces every secret
string a plugin was configured with by ``***`` in text that comes from elsewhere (a library's error message).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn
from urllib.parse import SplitResult, urlsplit

from local.records.constants import INT32_MAX
from tiered.errors import RemoteConfigError, RemoteStorageError

logger = logging.getLogger(__name__)

PREFIX = "rsm.config."
HIDDEN = "[hidden]"
_SECRET_WORDS = ("secret", "password", "passwd", "pwd", "token", "credential", "access_key", "accesskey", "key_id",
                 "private", "passphrase", "sas", "api_key", "apikey", "auth")
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/?#@\s]*)@")


def is_secret_key(key: str) -> bool:
    name = key.lower()
    return any(word in name for word in _SECRET_WORDS) or name.rsplit(".", 1)[-1] == "key"


def redact_url(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def redact_config(props: Mapping[str, Any]) -> dict[str, str]:
    """A copy of a configuration safe to print: secret values hidden, URL userinfo masked."""
    return {k: HIDDEN if is_secret_key(k) else redact_url(str(v)) for k, v in props.items()}


class Redactor:
    """Replaces the secrets a plugin was configured with (and any URL userinfo) by ``***`` in a text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: frozenset[str] = frozenset()
        self._ordered: tuple[str, ...] = ()  # longest first; replaced whole, so readers on other threads need no lock
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        new = {s for s in secrets if s and len(s) >= 3}  # shorter ones would mask ordinary text
        if new - self.secrets:
            self.secrets = self.secrets | new
            self._ordered = tuple(sorted(self.secrets, key=len, reverse=True))

    def __call__(self, text: object) -> str:
        out = redact_url(str(text))
        for secret in self._ordered:
            if secret in out:
                out = out.replace(secret, "***")
        return out

    def leaks(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` or an exception it chains to mentions a secret (so it must not be chained)."""
        seen = 0
        while exc is not None and seen < 20:
            text = f"{exc} {exc.args!r}"
            if self(text) != text:
                return True
            exc = exc.__cause__ or exc.__context__
            seen += 1
        return False

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secret(s))"


class LibraryLogRedaction(logging.Filter):
    """Masks the registered secrets in the records of a library's loggers (botocore logs its requests' headers at
    DEBUG, the access key id and session token among them). One instance, shared: secrets are only ever added."""

    def __init__(self) -> None:
        super().__init__()
        self.redactor = Redactor()
        self._attached: set[str] = set()

    def attach(self, *logger_names: str) -> None:
        for name in logger_names:
            if name not in self._attached:
                logging.getLogger(name).addFilter(self)
                self._attached.add(name)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.redactor.secrets:
            try:
                message = record.getMessage()
            except Exception:
                return True
            clean = self.redactor(message)
            if clean != message:
                record.msg, record.args = clean, ()
        return True


LIBRARY_LOG_REDACTION = LibraryLogRedaction()


class Options:
    """The configuration of one plugin, validated key by key (see the module docstring)."""

    def __init__(self, props: Mapping[str, Any], *, prefix: str = PREFIX, known: Iterable[str] = (),
                 known_prefixes: Iterable[str] = ()) -> None:
        self.props = {str(k): v for k, v in props.items()}
        self.prefix = prefix
        self.redactor = Redactor(str(v) for k, v in self.props.items() if is_secret_key(k) and v is not None)
        for value in self.props.values():
            parts = _split(str(value))
            if parts is not None and parts.password:
                self.redactor.add(parts.password, f"{parts.username}:{parts.password}")
        unknown = [k for k in self.props if k not in set(known) and not k.startswith(tuple(known_prefixes))]
        if known and unknown:
            logger.warning("unknown remote storage configuration key(s) ignored: %s",
                           ", ".join(prefix + k for k in sorted(unknown)))

    def bad(self, key: str, value: Any, why: str) -> RemoteConfigError:
        shown = HIDDEN if is_secret_key(key) else redact_url(str(value))
        return RemoteConfigError(f"Invalid value {shown} for configuration {self.prefix}{key}: {why}",
                                 key=self.prefix + key, value=shown)

    def missing(self, key: str, what: str) -> RemoteConfigError:
        return RemoteConfigError(f"Missing required configuration {self.prefix}{key}: {what}", key=self.prefix + key)

    def raw(self, key: str) -> str | None:
        value = self.props.get(key)
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def string(self, key: str, default: str | None = None, *, required: str | None = None) -> str | None:
        """The value as a string (``default`` when absent or empty); ``required`` (what it is for) makes it
        mandatory."""
        value = self.raw(key)
        if value is None:
            if required is not None:
                raise self.missing(key, required)
            return default
        if any(ord(c) < 32 for c in value):
            raise self.bad(key, value, "must not contain control characters")
        return value

    def integer(self, key: str, default: int | None, lo: int, hi: int = INT32_MAX) -> int | None:
        value = self.raw(key)
        if value is None:
            return default
        try:
            number = int(value.replace("_", ""), 10)
        except ValueError:
            raise self.bad(key, value, f"expected a whole number in {lo}..{hi}") from None
        if not lo <= number <= hi:
            raise self.bad(key, value, f"must be in {lo}..{hi}")
        return number

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        lowered = value.lower()
        if lowered not in ("true", "false"):
            raise self.bad(key, value, "expected true or false")
        return lowered == "true"

    def choice(self, key: str, default: str | None, choices: Iterable[str]) -> str | None:
        value = self.raw(key)
        if value is None:
            return default
        allowed = list(choices)
        if value not in allowed:
            raise self.bad(key, value, f"must be one of {', '.join(allowed)}")
        return value

    def url(self, key: str, schemes: Iterable[str], *, required: str | None = None) -> tuple[str | None, str | None, str | None]:
        """The URL without its userinfo, and the user and password it held (None when none)."""
        value = self.string(key, required=required)
        if value is None:
            return None, None, None
        allowed = list(schemes)
        parts = _split(value)
        if parts is None or parts.scheme.lower() not in allowed:
            raise self.bad(key, value, f"expected a URL with scheme {' or '.join(allowed)}")
        try:
            parts.port  # noqa: B018 - raises for a port that is not a number or out of range
        except ValueError:
            raise self.bad(key, value, "the port must be a number in 0..65535") from None
        if parts.scheme.lower() in ("http", "https") and not parts.hostname:
            raise self.bad(key, value, "the URL has no host")
        host = parts.netloc.rpartition("@")[2]
        clean = parts._replace(netloc=host).geturl()
        return clean, parts.username or None, parts.password or None

    def secret(self, key: str) -> str | None:
        return self.string(key)


def storage_failure(redact: Redactor, message: str, exc: BaseException | None, **context: Any) -> RemoteStorageError:
    """A RemoteStorageError whose message has no secret in it (and which is not chained to ``exc`` when that
    mentions one: a traceback would print it)."""
    err = RemoteStorageError(redact(message), **context)
    if exc is not None and not redact.leaks(exc):
        err.__cause__ = exc
    else:
        err.__suppress_context__ = True
    return err


def raise_failure(err: RemoteStorageError) -> NoReturn:
    """Raise ``err`` chained as :func:`storage_failure` decided (not to an error that mentions a secret)."""
    raise err from err.__cause__


def _split(value: str) -> SplitResult | None:
    if "://" not in value:
        return None
    try:
        return urlsplit(value)
    except ValueError:
        return None
