"""Secrets: database passwords are never shown, and fingerprints keep no secret-looking value."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from auditor.plugins.collectors import environment
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.common.logs import setup_logging
from auditor.common.redact import REDACTED, redact_fingerprint, redact_text, redact_url
from auditor.config.load import parse
from auditor.config.tables import ConfigError, SecretsConfig, StackConfig
from auditor.fingerprint import collect as fingerprint
from tests.unit.fingerprint.test_fingerprint_cli import to_toml

PASSWORD = "hunter2-s3cret"
URL = f"postgresql://auditor:{PASSWORD}@127.0.0.1:1/history"


def test_redact_url_and_text():
    assert redact_url(URL) == "postgresql://auditor:***@127.0.0.1:1/history"
    assert redact_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert PASSWORD not in redact_url(f"not a url {URL}")
    text = f"cannot open {URL}: refused; also mysql://a:b@h/d"
    assert (
        redact_text(text)
        == "cannot open postgresql://auditor:***@127.0.0.1:1/history: refused; also mysql://a:***@h/d"
    )


QUERY_URL = f"postgresql://auditor@db:5432/history?sslmode=require&password={PASSWORD}&sslpassword=k3y-pw"


def test_redact_url_hides_query_parameters_that_hold_secrets():
    shown = redact_url(QUERY_URL)
    assert PASSWORD not in shown and "k3y-pw" not in shown
    assert "password=***" in shown and "sslpassword=***" in shown and "sslmode=require" in shown
    assert redact_url(f"postgresql://u:{PASSWORD}@h/d?token=abc&application_name=x") == (
        "postgresql://u:***@h/d?application_name=x&token=***"
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"cannot open {QUERY_URL}: refused", None),
        (f"env MS_API_TOKEN={PASSWORD} GLOG_v=2", "env MS_API_TOKEN=*** GLOG_v=2"),
        (f"host=db password={PASSWORD} user=x", "host=db password=*** user=x"),
        (f"password = '{PASSWORD} x'", "password = ***"),
        (f"{{'MS_API_TOKEN': '{PASSWORD}', 'X': '1'}}", "{'MS_API_TOKEN': '***', 'X': '1'}"),
        (f'{{"db_password": "{PASSWORD}"}}', '{"db_password": "***"}'),
        (f"run --password={PASSWORD} --api-key k -v", "run --password=*** --api-key *** -v"),
        ("keep_days=3 GLOG_v=2 --jit=1", "keep_days=3 GLOG_v=2 --jit=1"),
    ],
)
def test_redact_text_hides_every_written_form(text, shown):
    out = redact_text(text)
    assert PASSWORD not in out and "k3y-pw" not in out
    if shown is not None:
        assert out == shown
    else:  # the sentence around the URL is kept
        assert out.endswith(": refused") and "sslmode=require" in out


def test_config_check_hides_the_database_password(doc, tmp_path):
    doc["storage"]["url"] = URL
    path = tmp_path / "auditor.toml"
    path.write_text(to_toml(doc))
    result = CliRunner().invoke(cli, ["--config", str(path), "config", "check"])
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output
    assert "postgresql://auditor:***@127.0.0.1:1/history" in result.output


@pytest.mark.parametrize(
    "args", [["runs"], ["history"], ["alerts"], ["db", "current"], ["db", "check"], ["db", "upgrade"]]
)
@pytest.mark.parametrize("url", [URL, QUERY_URL.replace("db:5432", "127.0.0.1:1")])
def test_database_errors_hide_the_password(args, url):
    result = CliRunner().invoke(cli, ["--db", url, *args])
    assert result.exit_code != 0
    assert PASSWORD not in result.output and "k3y-pw" not in result.output, result.output


def test_daemon_log_hides_passwords(capsys):
    handler = setup_logging(journal=False)
    try:
        logging.getLogger("auditor.test").error("cannot open %s: refused", URL)
        logging.getLogger("auditor.test").error("history %s; env %s", QUERY_URL, {"MS_API_TOKEN": PASSWORD})
    finally:
        logging.getLogger().removeHandler(handler)
    err = capsys.readouterr().err
    assert "cannot open postgresql://auditor:***@127.0.0.1:1/history: refused" in err
    assert PASSWORD not in err and "k3y-pw" not in err and "'MS_API_TOKEN': '***'" in err


# -- fingerprints -----------------------------------------------------------------------------------

ENVIRON = {
    "MS_AUTH_HEADER": "Bearer abc",
    "MS_API_TOKEN": "t0k",
    "ASCEND_DB_PASSWORD": "pw",
    "MS_SERVICE_KEY": "k",
    "MS_OPTS": "--jit=1 --password=pw1 --api-key pw2 --token 'pw3' -v",
    "MS_REMOTE": f"https://user:{PASSWORD}@models.example/x?sig=1&access_token=pw4",
    "MS_PLAIN": "1",
    "MS_SITE_LABEL": "acme-prod-7",
    "ASCEND_CUSTOM_OPP_PATH": "/opt/opp",
}


def test_environment_collector_redacts_secret_names_options_and_urls():
    section = environment.collect({"environ": ENVIRON})
    for name in ("MS_AUTH_HEADER", "MS_API_TOKEN", "ASCEND_DB_PASSWORD", "MS_SERVICE_KEY"):
        assert section[name] == REDACTED, name
    assert section["MS_OPTS"] == f"--jit=1 --password={REDACTED} --api-key {REDACTED} --token {REDACTED} -v"
    assert PASSWORD not in section["MS_REMOTE"] and "pw4" not in section["MS_REMOTE"]
    assert section["MS_PLAIN"] == "1" and section["ASCEND_CUSTOM_OPP_PATH"] == "/opt/opp"
    assert section["MS_SITE_LABEL"] == "acme-prod-7"


def test_environment_collector_takes_extra_patterns():
    section = environment.collect(
        {"environ": ENVIRON, "redact_names": ["ms_site_*"], "redact_values": [r"/opt/op+"]}
    )
    assert section["MS_SITE_LABEL"] == REDACTED
    assert section["ASCEND_CUSTOM_OPP_PATH"] == REDACTED


class FakeWorker:
    """What fingerprint.collect needs of a worker: a reply to "fingerprint" and a hello. It
    answers as a plugin collector that did not redact anything would."""

    request_timeout = 10.0
    is_remote = False

    def __init__(self) -> None:
        self.context: dict = {}
        self.hello = {"pid": 1, "python": "3.7.17", "argv": f"--db {URL}"}

    def request(self, op: str, timeout: float, collectors: list, context: dict) -> SimpleNamespace:
        self.context = context
        document = {
            "environment": {"MY_SITE_CRED": "x", "MS_PLAIN": "1", "MS_OPTS": "--password=pw"},
            "plugin_section": {"remote": URL, "note": "token hunter2-s3cret"},
        }
        return SimpleNamespace(result={"fingerprint": document})


def test_fingerprints_are_redacted_in_the_auditor_before_anything_sees_them():
    worker = FakeWorker()
    stack = StackConfig("s", "train", "mindspore", "/x")
    secrets = SecretsConfig(names=("*_CRED",), values=(r"hunter\d-\w+",))
    doc = fingerprint.collect(worker, stack, ["environment"], secrets=secrets)  # type: ignore[arg-type]
    assert worker.context["redact_names"] == ["*_CRED"]  # the worker redacts too
    assert worker.context["redact_values"] == [r"hunter\d-\w+"]
    assert doc["environment"] == {
        "MY_SITE_CRED": REDACTED,
        "MS_PLAIN": "1",
        "MS_OPTS": f"--password={REDACTED}",
    }
    assert PASSWORD not in str(doc)
    assert doc["plugin_section"]["note"] == f"token {REDACTED}"
    assert "pid" not in doc["runtime"]


def test_redact_fingerprint_leaves_ordinary_values():
    doc = {"packages": {"numpy": "1.21.6"}, "environment": {"OMP_NUM_THREADS": "4"}, "host": {"cpus": 2}}
    assert redact_fingerprint(doc) == doc


def test_secrets_config_section(tmp_path):
    base = {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/p"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/p"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["ppo_policy"]}],
    }
    config = parse({**base, "secrets": {"names": ["*_CRED*"], "values": ["sk-[a-z0-9]+"]}})
    assert config.secrets == SecretsConfig(names=("*_CRED*",), values=("sk-[a-z0-9]+",))
    assert parse(base).secrets == SecretsConfig()
    with pytest.raises(ConfigError) as info:
        parse({**base, "secrets": {"names": "X", "values": ["(unclosed"], "other": 1}})
    assert sorted(e.partition(": ")[0] for e in info.value.errors) == [
        "secrets.names",
        "secrets.other",
        "secrets.values[0]",
    ]


def test_fingerprint_context_carries_the_patterns(tmp_path: Path):
    stack = StackConfig("s", "train", "mindspore", "/x")
    context = fingerprint.context_for(stack, SecretsConfig(names=("A*",)))
    assert context["redact_names"] == ["A*"] and context["redact_values"] == []


def test_a_command_line_keeps_its_words_and_loses_its_secrets():
    """A host's ``command`` prefix (#54): each way a program takes a credential on its command
    line; the words around it stay, so the line still says how the host is reached."""
    from auditor.common.redact import redact_argv

    assert redact_argv(["kubectl", "--token", "abc", "exec", "-i", "pod", "--"]) == [
        "kubectl", "--token", "***", "exec", "-i", "pod", "--"
    ]  # fmt: skip
    assert redact_argv(["kubectl", "--token=abc", "exec"]) == ["kubectl", "--token=***", "exec"]
    assert redact_argv(["env", "API_TOKEN=xyz", "H={host}", "ssh", "box"]) == [
        "env", "API_TOKEN=***", "H={host}", "ssh", "box"
    ]  # fmt: skip
    assert redact_argv(["curl", "-H", "Authorization: Bearer zzz", "https://u:pw@h/x"]) == [
        "curl", "-H", "Authorization: ***", "https://u:***@h/x"
    ]  # fmt: skip
    assert redact_argv(["sh", "-c", 'MY_SECRET=v exec "$@"', "sh"])[2] == 'MY_SECRET=*** exec "$@"'
    plain = ["docker", "exec", "-i", "box", "env", "LOG=/tmp/l", "--"]
    assert redact_argv(plain) == plain
