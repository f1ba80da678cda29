"""Which names and values are secrets, shared by both processes: the environment collector
applies it inside the stack (so a secret never leaves the worker) and the auditor applies it
again to every fingerprint it receives (auditor.common.redact), so a plugin collector's
section is covered too. Python 3.7, standard library only.
"""

import fnmatch
import re

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "AUTH", "KEY", "CREDENTIAL")
REDACTED = "<redacted>"
_WORD = "(?:token|secret|password|passwd|auth|key|credential)"
# Bounded repeats and a start that cannot be inside a word: linear time on any text.
_URL_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)[^/@\s:]+:[^/@\s]*@")
_LEADING_USERINFO = re.compile(r"^[^/@\s:=]+:[^/@\s]+@(?=[^\s@]+$)")
# "?password=x", "&sslpassword=x", ";token=x": a URL's query parameters (libpq takes any of its
# connection keywords there, password and sslpassword included).
# A value never ends with the punctuation of the sentence around it ("...?password=x: refused").
_VALUE = r"(?:[^&;\s]*[^&;\s:,.)'\"])?"
_SECRET_PARAM = re.compile(r"(?i)([?&;][^=&;?\s]{0,63}" + _WORD + r"[^=&;?\s]{0,63}=)" + _VALUE)
# "MS_API_TOKEN=x", "password = 'x'" in text (an env assignment, a libpq keyword/value string).
_SECRET_ASSIGN = re.compile(
    r"(?i)(?<![\w.?&;/-])((?:[a-z_][a-z0-9_]{0,63})?"
    + _WORD
    + r"[a-z0-9_]{0,63}[ \t]*=[ \t]*)(\"[^\"]*\"|'[^']*'|[^\s\"',;&)]*[^\s\"',;&):.])"
)
# "'MS_API_TOKEN': 'x'", "\"password\": \"x\"" (a mapping printed as Python or JSON).
_SECRET_ITEM = re.compile(
    r"(?i)(([\"'])[a-z0-9_.-]{0,63}"
    + _WORD
    + r"[a-z0-9_.-]{0,63}\2[ \t]*:[ \t]*)(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
)
# "--password=x", "--api-key x", "-auth-token=x" inside an option string (e.g. MS_*_OPTIONS).
_SECRET_OPTION = re.compile(
    r"(?i)((?:^|\s)--?[a-z0-9_.-]{0,63}" + _WORD + r"[a-z0-9_.-]{0,63})"
    r"(=|\s+)(?!-)(\"[^\"]*\"|'[^']*'|\S+)"
)


def secret_name(name, patterns=()):
    """Whether a variable's name says its value is a secret (or a configured pattern says so)."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return True
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def redact_value(value, patterns=()):
    """A value with the credentials it holds replaced by ``<redacted>``."""
    value = _URL_USERINFO.sub(r"\1" + REDACTED + "@", value)
    value = _LEADING_USERINFO.sub(REDACTED + "@", value)
    value = _SECRET_PARAM.sub(r"\1" + REDACTED, value)
    value = _SECRET_OPTION.sub(lambda m: m.group(1) + m.group(2) + REDACTED, value)
    for pattern in patterns:
        value = re.sub(pattern, REDACTED, value)
    return value


def redact_text(text, marker=REDACTED, patterns=()):
    """Free text (a message, a log line, an error from a driver) with every credential this
    module recognises replaced by ``marker``: a URL's password and secret query parameters,
    secret-named assignments and mapping items, secret command-line options."""
    text = _URL_USERINFO.sub(lambda m: m.group(0).rsplit(":", 1)[0] + ":" + marker + "@", text)
    text = _SECRET_PARAM.sub(lambda m: m.group(1) + marker, text)
    text = _SECRET_ASSIGN.sub(lambda m: m.group(1) + marker, text)
    text = _SECRET_ITEM.sub(lambda m: m.group(1) + m.group(2) + marker + m.group(2), text)
    text = _SECRET_OPTION.sub(lambda m: m.group(1) + m.group(2) + marker, text)
    for pattern in patterns:
        text = re.sub(pattern, marker, text)
    return text


# "Authorization: Bearer x", "X-Api-Token: x": a header given as one word of a command line.
_SECRET_HEADER = re.compile(r"(?i)^(\s*(?:proxy-)?[a-z0-9-]{0,63}" + _WORD + r"[a-z0-9-]{0,63}\s*:\s*)\S.*$")


def redact_argv(argv, marker=REDACTED, patterns=()):
    """A command line (a host's ``command`` prefix) with its secrets replaced by ``marker``,
    word by word: a secret option's value whether in the same word (``--token=x``) or the next
    (``--token x``), a secret-named assignment (``API_TOKEN=x``, as ``env`` takes), a header
    (``Authorization: Bearer x``), and in any word what redact_text finds (a URL's password)."""
    out = []
    hide_next = False
    for word in argv:
        word = str(word)
        if hide_next:
            out.append(marker)
            hide_next = False
            continue
        name, eq, value = word.partition("=")
        bare = name.lstrip("-")
        if word.startswith("-") and not eq and secret_name(bare.replace("-", "_"), patterns):
            out.append(word)
            hide_next = True
        elif eq and bare and secret_name(bare.replace("-", "_"), patterns) and " " not in word:
            out.append(name + "=" + marker)
        elif _SECRET_HEADER.match(word):
            out.append(_SECRET_HEADER.sub(lambda m: m.group(1) + marker, word))
        else:
            out.append(redact_text(word, marker))
    return out


def redact(name, value, names=(), values=()):
    """The value as it may be stored: secrets replaced by ``<redacted>``. ``names`` are extra
    shell patterns of secret variable names, ``values`` extra regular expressions of secrets."""
    if secret_name(name, names):
        return REDACTED
    return redact_value(value, values)
