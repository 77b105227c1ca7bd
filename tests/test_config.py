"""Configuration file, environment overrides and API keys (docs/operations.md, "Configure").

Matching a presented key and what each role may call: tests/http/test_api_keys.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta

import pytest

from ticket_dispatcher.config import (
    AccessRole,
    ApiKey,
    CalendarFeed,
    Config,
    load_config,
    masked,
)
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.settings import format_duration

SECRET = "s3cr3t-value-never-shown"
LONG_KEY = "long-enough-key-0123456789"  # plain keys need 24 characters


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def write_toml(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "ticket-dispatcher.toml"
        path.write_text(text)
        return str(path)

    return write


def config_error(path: str | None = None, environ: dict | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ or {})
    return caught.value.message


# --- defaults and the file ---------------------------------------------------------------------


def test_defaults_without_file_or_environment():
    config = load_config(None, environ={})

    assert config == Config()
    assert config.database_url == "sqlite:///ticket-dispatcher.db"
    assert config.execution_slots == 10
    assert config.trigger_actors == 4
    assert config.client_pool_size == 0 and config.client_actors == 14
    assert config.trigger_defer_interval == timedelta(seconds=5)
    assert config.trigger_poll_interval == timedelta(seconds=5)
    assert config.execution_load_retries == 5
    assert config.actor_restarts == 3
    assert config.shutdown_timeout == timedelta(seconds=10)
    assert (config.http.host, config.http.port, config.http.threads) == ("127.0.0.1", 8080, 8)
    assert config.http.max_body_bytes == 1_048_576
    assert (config.http.trigger_rate, config.http.trigger_burst) == (20.0, 100)
    assert config.http.connection_limit == 1000
    assert config.http.channel_timeout == timedelta(seconds=30)
    assert config.http.max_json_depth == 64
    assert config.auth.metrics_public is True
    assert (config.auth.failure_rate, config.auth.failure_burst) == (0.1, 10)
    assert config.auth.api_keys == ()
    assert config.notifications.enabled is False
    assert config.jira.l2_field_id == "customfield_10053"
    assert config.jira.severity_field_id == "customfield_10076"
    assert config.jira.auto_assign_label == "auto-dispatch"
    assert config.lark.base_url == "https://open.feishu.cn"
    assert config.integrations.connect_timeout == timedelta(seconds=3)
    assert config.integrations.read_timeout == timedelta(seconds=10)
    assert config.log_level == "INFO"
    assert config.cpu_affinity is None


def test_toml_file_sets_every_kind_of_value(write_toml):
    path = write_toml(
        f"""
        database_url = "postgresql://dispatcher@db:5432/tickets"
        execution_slots = 3
        trigger_defer_interval = "500ms"
        trigger_poll_interval = "2m"

        [http]
        port = 9000
        trigger_rate = 2.5

        [auth]
        metrics_public = false
        [[auth.api_keys]]
        name = "jira-automation"
        role = "automation"
        key_sha256 = "{sha256("auto-key").upper()}"
        [[auth.api_keys]]
        name = "ops"
        role = "operator"
        key = "ops-key-0123456789abcdefghij"

        [notifications]
        enabled = true

        [jira]
        base_url = "https://example.atlassian.net"
        api_token = "{SECRET}"
        """
    )

    config = load_config(path, environ={})

    assert config.database_url == "postgresql://dispatcher@db:5432/tickets"
    assert config.execution_slots == 3
    assert config.trigger_defer_interval == timedelta(milliseconds=500)
    assert config.trigger_poll_interval == timedelta(minutes=2)
    assert (config.http.port, config.http.trigger_rate) == (9000, 2.5)
    assert config.http.host == "127.0.0.1"
    assert config.auth.metrics_public is False
    assert config.auth.api_keys == (
        ApiKey("jira-automation", AccessRole.AUTOMATION, sha256("auto-key")),
        ApiKey("ops", AccessRole.OPERATOR, sha256("ops-key-0123456789abcdefghij")),
    )
    assert config.notifications.enabled is True
    assert config.jira.base_url == "https://example.atlassian.net"
    assert config.jira.api_token == SECRET


def test_config_path_comes_from_the_environment_when_not_given(write_toml):
    path = write_toml("execution_slots = 7\n")

    config = load_config(None, environ={"TICKET_DISPATCHER_CONFIG": path})

    assert config.execution_slots == 7


def test_missing_config_file_is_a_config_error(tmp_path):
    message = config_error(str(tmp_path / "absent.toml"))

    assert "absent.toml" in message and "cannot read" in message


def test_malformed_toml_is_a_config_error(write_toml):
    assert "not valid TOML" in config_error(write_toml("http = [\n"))


# --- environment overrides ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "read", "expected"),
    [
        ("TICKET_DISPATCHER_DATABASE_URL", "sqlite:///tmp/x.db", lambda c: c.database_url,
         "sqlite:///tmp/x.db"),
        ("TICKET_DISPATCHER_EXECUTION_SLOTS", "12", lambda c: c.execution_slots, 12),
        ("TICKET_DISPATCHER_TRIGGER_DEFER_INTERVAL", "250ms", lambda c: c.trigger_defer_interval,
         timedelta(milliseconds=250)),
        ("TICKET_DISPATCHER_HTTP_PORT", "9090", lambda c: c.http.port, 9090),
        ("TICKET_DISPATCHER_HTTP_TRIGGER_RATE", "0.5", lambda c: c.http.trigger_rate, 0.5),
        ("TICKET_DISPATCHER_AUTH_METRICS_PUBLIC", "no", lambda c: c.auth.metrics_public, False),
        ("TICKET_DISPATCHER_NOTIFICATIONS_ENABLED", "1", lambda c: c.notifications.enabled, True),
        ("TICKET_DISPATCHER_NOTIFICATIONS_ENABLED", "TRUE", lambda c: c.notifications.enabled,
         True),
        ("TICKET_DISPATCHER_JIRA_API_TOKEN", SECRET, lambda c: c.jira.api_token, SECRET),
        ("TICKET_DISPATCHER_LARK_APP_ID", "cli_a1", lambda c: c.lark.app_id, "cli_a1"),
        ("TICKET_DISPATCHER_CORE_BASE_URL", "http://core:8000", lambda c: c.core.base_url,
         "http://core:8000"),
        ("TICKET_DISPATCHER_INTEGRATIONS_READ_TIMEOUT", "30s",
         lambda c: c.integrations.read_timeout, timedelta(seconds=30)),
        ("TICKET_DISPATCHER_LOG_LEVEL", "debug", lambda c: c.log_level, "DEBUG"),
        ("TICKET_DISPATCHER_CPU_AFFINITY", "Off", lambda c: c.cpu_affinity, None),
        ("TICKET_DISPATCHER_CPU_AFFINITY", "", lambda c: c.cpu_affinity, None),
        ("TICKET_DISPATCHER_CPU_AFFINITY", " 3 ", lambda c: c.cpu_affinity, 3),
        ("TICKET_DISPATCHER_SHUTDOWN_TIMEOUT", "25s", lambda c: c.shutdown_timeout,
         timedelta(seconds=25)),
    ],
)
def test_environment_overrides_a_key(name, text, read, expected):
    assert read(load_config(None, environ={name: text})) == expected


def test_environment_wins_over_the_file(write_toml):
    path = write_toml("[http]\nport = 9000\nthreads = 2\n")

    config = load_config(path, environ={"TICKET_DISPATCHER_HTTP_PORT": "9001"})

    assert (config.http.port, config.http.threads) == (9001, 2)


def test_api_keys_from_the_environment_are_added_to_the_file_keys(write_toml):
    path = write_toml(
        f'[[auth.api_keys]]\nname = "file"\nrole = "viewer"\nkey_sha256 = "{sha256("f")}"\n'
    )
    environ = {"TICKET_DISPATCHER_AUTH_API_KEYS":
               "jira:automation:k1-0123456789abcdefghijkl, ops:operator:a:b:c-0123456789abcdefghij"}

    keys = load_config(path, environ=environ).auth.api_keys

    assert keys == (
        ApiKey("file", AccessRole.VIEWER, sha256("f")),
        ApiKey("jira", AccessRole.AUTOMATION, sha256("k1-0123456789abcdefghijkl")),
        # a key may contain ':'
        ApiKey("ops", AccessRole.OPERATOR, sha256("a:b:c-0123456789abcdefghij")),
    )


def test_plain_keys_are_not_kept_in_memory():
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": f"x:viewer:{SECRET}"})

    assert SECRET not in repr(config)
    assert SECRET not in repr(config.auth.api_keys[0].__dict__)


def test_config_test_and_client_key_variables_are_not_settings():
    environ = {
        "TICKET_DISPATCHER_CONFIG": "",
        "TICKET_DISPATCHER_API_KEY": "the key `policy plan` sends, set beside the service",
        "TICKET_DISPATCHER_TEST_DATABASE_URL": "postgresql://postgres@127.0.0.1/test",
        "UNRELATED": "1",
    }

    assert load_config(None, environ=environ) == Config()


# --- bad values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[http]\nport = "abc"', 'http.port: expected an integer between 1 and 65535, got "abc"'),
        ("[http]\nport = 70000", "http.port: expected an integer between 1 and 65535, got 70000"),
        ("[http]\nport = true", "http.port: expected an integer"),
        ("execution_slots = 0", "execution_slots: expected an integer between 1 and 100, got 0"),
        ("execution_slots = -3", "execution_slots: expected an integer between 1 and 100"),
        ("execution_slots = 101",
         "execution_slots: expected an integer between 1 and 100, got 101"),
        ("trigger_actors = 33", "trigger_actors: expected an integer between 1 and 32, got 33"),
        ("[http]\nthreads = 65", "http.threads: expected an integer between 1 and 64, got 65"),
        ("[http]\nthreads = 0", "http.threads: expected an integer between 1 and 64, got 0"),
        ('shutdown_timeout = "0s"', "shutdown_timeout: expected a positive duration"),
        ("shutdown_timeout = 10", "shutdown_timeout: expected a positive duration"),
        ("actor_restarts = 1.5", "actor_restarts: expected an integer >= 0"),
        ('trigger_poll_interval = "soon"', "trigger_poll_interval: expected a positive duration"),
        ("trigger_poll_interval = 5", "trigger_poll_interval: expected a positive duration"),
        ('trigger_defer_interval = "0s"', "trigger_defer_interval: expected a positive duration"),
        ("[http]\ntrigger_rate = -1", "http.trigger_rate: expected a number >= 0"),
        ("[http]\ntrigger_burst = 0", "http.trigger_burst: must be at least 1"),
        ('[auth]\nmetrics_public = "yes"', "auth.metrics_public: expected true or false"),
        ('database_url = "mysql://db/x"', "database_url: expected a URL starting with sqlite:///"),
        ('[jira]\nbase_url = "ftp://jira"', "jira.base_url: expected an http:// or https:// URL"),
        ("[jira]\nemail = 3", "jira.email: expected a string, got 3"),
        ('[jira]\nl2_field_id = ""', 'jira.l2_field_id: expected a Jira field id'),
        ('[http]\nhost = ""', 'http.host: expected a non-empty string, got ""'),
        ('log_level = "LOUD"', "log_level: expected one of DEBUG, INFO"),
        ('cpu_affinity = "all"',
         'cpu_affinity: expected a CPU number (0 or more), or "off" to leave the CPU '
         'placement alone, got "all"'),
        ("cpu_affinity = -1", "cpu_affinity: expected a CPU number (0 or more)"),
        ("cpu_affinity = true", "cpu_affinity: expected a CPU number (0 or more)"),
        ('cpu_affinity = "auto"', 'cpu_affinity: expected a CPU number (0 or more), or "off" '
         'to leave the CPU placement alone ("auto" is gone: serve leaves the CPU placement to '
         'the operator unless given a CPU), got "auto"'),
        ("http = 3", "http: expected a table"),
        ("[auth]\napi_keys = 3", "auth.api_keys: expected an array of tables"),
        ('[[auth.api_keys]]\nname = "a"\nrole = "admin"\nkey = "k"',
         'auth.api_keys[0].role: expected one of automation, viewer, operator, got "admin"'),
        ('[[auth.api_keys]]\nname = "a"\nrole = "viewer"',
         "auth.api_keys[0]: expected exactly one of key or key_sha256"),
        (f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey = "k"\nkey_sha256 = "{"0" * 64}"',
         "auth.api_keys[0]: expected exactly one of key or key_sha256"),
        ('[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey_sha256 = "abc"',
         "auth.api_keys[0].key_sha256: expected 64 hexadecimal characters"),
        (f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey_sha256 = "{"g" * 64}"',
         "auth.api_keys[0].key_sha256: expected 64 hexadecimal characters"),
        ('[[auth.api_keys]]\nrole = "viewer"\nkey = "k"',
         "auth.api_keys[0].name: expected a non-empty string"),
        (f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey = "{LONG_KEY}"\n'
         f'[[auth.api_keys]]\nname = "a"\nrole = "operator"\nkey = "{LONG_KEY}2"',
         'auth.api_keys: duplicate key name "a"'),
        (f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey = "{LONG_KEY}"\n'
         f'[[auth.api_keys]]\nname = "b"\nrole = "operator"\nkey = "{LONG_KEY}"',
         'auth.api_keys: keys "a" and "b" are the same key'),
    ],
)
def test_bad_file_value_names_the_key(write_toml, toml, expected):
    assert expected in config_error(write_toml(toml))


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("TICKET_DISPATCHER_HTTP_PORT", "abc",
         'TICKET_DISPATCHER_HTTP_PORT: expected an integer between 1 and 65535, got "abc"'),
        ("TICKET_DISPATCHER_EXECUTION_SLOTS", "-1", "TICKET_DISPATCHER_EXECUTION_SLOTS: expected"),
        ("TICKET_DISPATCHER_HTTP_TRIGGER_RATE", "fast",
         "TICKET_DISPATCHER_HTTP_TRIGGER_RATE: expected a number"),
        ("TICKET_DISPATCHER_HTTP_TRIGGER_RATE", "nan",
         "TICKET_DISPATCHER_HTTP_TRIGGER_RATE: expected a number"),
        ("TICKET_DISPATCHER_CPU_AFFINITY", "1.5",
         "TICKET_DISPATCHER_CPU_AFFINITY: expected a CPU number (0 or more)"),
        ("TICKET_DISPATCHER_NOTIFICATIONS_ENABLED", "maybe",
         "TICKET_DISPATCHER_NOTIFICATIONS_ENABLED: expected true or false"),
        ("TICKET_DISPATCHER_TRIGGER_POLL_INTERVAL", "5 parsecs",
         "TICKET_DISPATCHER_TRIGGER_POLL_INTERVAL: expected a positive duration"),
        ("TICKET_DISPATCHER_AUTH_API_KEYS", "just-a-key",
         "TICKET_DISPATCHER_AUTH_API_KEYS entry 1: expected name:role:key"),
        ("TICKET_DISPATCHER_AUTH_API_KEYS", "a:viewer:k,b:root:k2",
         "TICKET_DISPATCHER_AUTH_API_KEYS entry 2: expected a role among"),
        # URLs whose host or port is none: the clients could never call them
        ("TICKET_DISPATCHER_ONCALL_BASE_URL", "http://[bad",
         "TICKET_DISPATCHER_ONCALL_BASE_URL: expected an http:// or https:// URL"),
        ("TICKET_DISPATCHER_JIRA_BASE_URL", "https://jira.x:notaport",
         "TICKET_DISPATCHER_JIRA_BASE_URL: expected an http:// or https:// URL"),
        ("TICKET_DISPATCHER_LARK_BASE_URL", "https://",
         "TICKET_DISPATCHER_LARK_BASE_URL: expected an http:// or https:// URL"),
        # past what a wait can be given, and past the threads a process can start
        ("TICKET_DISPATCHER_SHUTDOWN_TIMEOUT", "999999d",
         'TICKET_DISPATCHER_SHUTDOWN_TIMEOUT: expected a positive duration like "500ms", "5s" '
         'or "5m", at most "3650d"'),
        ("TICKET_DISPATCHER_INTEGRATIONS_READ_TIMEOUT", "3651d",
         "TICKET_DISPATCHER_INTEGRATIONS_READ_TIMEOUT: expected a positive duration"),
        ("TICKET_DISPATCHER_CLIENT_POOL_SIZE", "3000",
         "TICKET_DISPATCHER_CLIENT_POOL_SIZE: expected an integer between 0 and 256"),
    ],
)
def test_bad_environment_value_names_the_variable(name, text, expected):
    assert expected in config_error(environ={name: text})


def test_the_largest_thread_counts_are_accepted(write_toml):
    path = write_toml("execution_slots = 100\ntrigger_actors = 32\n[http]\nthreads = 64\n")

    config = load_config(path, environ={})

    assert (config.execution_slots, config.trigger_actors, config.http.threads) == (100, 32, 64)
    assert config.client_actors == 132


def test_client_pool_size_zero_gives_every_slot_and_trigger_actor_a_client(write_toml):
    config = load_config(write_toml("execution_slots = 40\ntrigger_actors = 4\n"), environ={})

    assert config.client_pool_size == 0 and config.client_actors == 44


def test_client_pool_size_covering_slots_and_trigger_actors_is_accepted(write_toml):
    path = write_toml("execution_slots = 40\ntrigger_actors = 4\nclient_pool_size = 44\n")

    assert load_config(path, environ={}).client_actors == 44


def test_client_pool_size_below_slots_and_trigger_actors_is_refused(write_toml):
    path = write_toml("execution_slots = 40\ntrigger_actors = 4\nclient_pool_size = 8\n")

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})

    assert [p.path for p in caught.value.problems] == ["client_pool_size"]
    assert caught.value.message == (
        "client_pool_size: must be 0 (one client per execution slot and trigger actor) or at "
        "least 44 (execution_slots 40 + trigger_actors 4), got 8"
    )


def test_client_pool_size_from_the_environment_is_checked_against_the_file(write_toml):
    path = write_toml("execution_slots = 20\n")
    environ = {"TICKET_DISPATCHER_CLIENT_POOL_SIZE": "23"}

    message = config_error(path, environ)

    assert message.startswith("TICKET_DISPATCHER_CLIENT_POOL_SIZE: must be 0")
    assert "at least 24 (execution_slots 20 + trigger_actors 4)" in message


def test_client_pool_size_is_not_compared_with_a_refused_slot_count(write_toml):
    path = write_toml("execution_slots = 500\nclient_pool_size = 5\n")

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})

    assert [p.path for p in caught.value.problems] == ["execution_slots"]


def test_unknown_file_key_and_section_are_errors(write_toml):
    message = config_error(write_toml("[http]\nprot = 1\n[jiraa]\nbase_url = ''\n"))

    assert "http.prot: unknown key (did you mean port?)" in message
    assert "jiraa: unknown key (did you mean jira?)" in message


def test_unknown_key_in_an_api_key_entry_is_an_error(write_toml):
    path = write_toml('[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey = "k"\nscope = "x"\n')

    assert "auth.api_keys[0].scope: unknown key" in config_error(path)


def test_unknown_environment_variable_is_an_error():
    message = config_error(environ={"TICKET_DISPATCHER_HTTP_PROT": "1"})

    assert message.startswith("TICKET_DISPATCHER_HTTP_PROT: unknown setting")
    assert "TICKET_DISPATCHER_HTTP_PORT" in message


def test_every_problem_is_reported_at_once():
    error_environ = {"TICKET_DISPATCHER_HTTP_PORT": "0", "TICKET_DISPATCHER_HTTP_THREADS": "x"}
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ=error_environ)

    assert [p.path for p in caught.value.problems] == [
        "TICKET_DISPATCHER_HTTP_PORT",
        "TICKET_DISPATCHER_HTTP_THREADS",
    ]


@pytest.mark.parametrize(
    "environ",
    [
        {"TICKET_DISPATCHER_ORACLE": SECRET},  # an unknown variable: its value is not shown
        {"TICKET_DISPATCHER_DATABASE_URL": f"mysql://u:{SECRET}@db/x"},
        {"TICKET_DISPATCHER_JIRA_BASE_URL": f"ftp://u:{SECRET}@jira"},
        {"TICKET_DISPATCHER_AUTH_API_KEYS": f"name:{SECRET}"},
        {"TICKET_DISPATCHER_AUTH_API_KEYS": f"name:{SECRET}:rest"},
        {"TICKET_DISPATCHER_JIRA_API_TOKEN": SECRET, "TICKET_DISPATCHER_HTTP_PORT": "x"},
    ],
)
def test_secret_values_never_appear_in_error_messages(environ):
    message = config_error(environ=environ)

    assert SECRET not in message


def test_secret_file_values_never_appear_in_error_messages(write_toml):
    path = write_toml(
        f'[jira]\napi_token = ["{SECRET}"]\n[lark]\napp_secret = {{x = "{SECRET}"}}\n'
        f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\nkey = "{SECRET}"\nkey_sha256 = "x"\n'
        f'[[auth.api_keys]]\nname = "b"\nrole = "viewer"\nkey_sha256 = "{SECRET}"\n'
    )

    message = config_error(path)

    assert "jira.api_token: expected a string" in message
    assert "lark.app_secret: expected a string" in message
    assert SECRET not in message


# --- masking and secrets -----------------------------------------------------------------------


def loaded_with_secrets() -> Config:
    return load_config(
        None,
        environ={
            "TICKET_DISPATCHER_DATABASE_URL": f"postgresql://dispatcher:{SECRET}1@db:5432/x",
            "TICKET_DISPATCHER_JIRA_API_TOKEN": f"{SECRET}2",
            "TICKET_DISPATCHER_LARK_APP_SECRET": f"{SECRET}3",
            "TICKET_DISPATCHER_ONCALL_TOKEN": f"{SECRET}4",
            "TICKET_DISPATCHER_AUTH_API_KEYS": f"jira:automation:{SECRET}5",
            "TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS": f"{SECRET}6,{SECRET}7",
        },
    )


def test_masked_database_url_without_a_password_is_shown_as_is():
    config = load_config(None, environ={"TICKET_DISPATCHER_DATABASE_URL":
                                        "sqlite:///ticket-dispatcher.db"})

    assert masked(config)["database_url"] == "sqlite:///ticket-dispatcher.db"


def test_masked_config_replaces_every_secret():
    shown = masked(loaded_with_secrets())

    text = json.dumps(shown)
    assert SECRET not in text
    assert sha256(f"{SECRET}5") not in text
    assert shown["database_url"] == "postgresql://dispatcher:***@db:5432/x"
    assert shown["jira"]["api_token"] == "***"
    assert shown["lark"]["app_secret"] == "***"
    assert shown["oncall"]["token"] == "***"
    assert shown["core"]["token"] == ""  # empty stays empty: nothing is configured
    assert shown["jira"]["webhook_secrets"] == ["***", "***"]
    assert shown["auth"]["api_keys"] == [
        {"name": "jira", "role": "automation", "key_sha256": "***"}
    ]


def test_a_password_in_the_database_urls_query_is_masked_and_kept_from_the_log():
    # libpq takes the query's parameters as connection parameters: password= is one
    config = load_config(None, environ={"TICKET_DISPATCHER_DATABASE_URL":
                                        f"postgresql://bot@db:5432/x?sslmode=require&"
                                        f"PASSWORD={SECRET}%21&application_name=td"})

    shown = masked(config)["database_url"]
    assert shown == "postgresql://bot@db:5432/x?sslmode=require&PASSWORD=***&application_name=td"
    assert {f"{SECRET}%21", f"{SECRET}!"} <= set(config.secrets())


def test_masked_integration_url_hides_an_embedded_password():
    config = load_config(None, environ={
        "TICKET_DISPATCHER_JIRA_BASE_URL": f"https://bot:{SECRET}@jira.example.com"})

    assert masked(config)["jira"]["base_url"] == "https://bot:***@jira.example.com"


def test_masked_config_is_plain_json_with_durations_as_text():
    shown = masked(Config())

    assert json.loads(json.dumps(shown)) == shown
    assert shown["trigger_defer_interval"] == "5s"
    assert shown["shutdown_timeout"] == "10s"
    assert shown["integrations"]["read_timeout"] == "10s"
    assert shown["http"]["port"] == 8080


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=5), "5s"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(hours=2), "2h"),
    ],
)
def test_format_duration_is_the_shortest_exact_form(value, text):
    assert format_duration(value) == text


def test_secrets_lists_every_configured_secret():
    config = loaded_with_secrets()
    basic = base64.b64encode(f"{config.jira.email}:{config.jira.api_token}".encode()).decode()

    # the Jira Basic credential is the token too: an error body may echo the header back
    assert config.secrets() == sorted([*(f"{SECRET}{n}" for n in (1, 2, 3, 4, 6, 7)), basic])
    assert Config().secrets() == []


# --- hostile-input limits ----------------------------------------------------------------------

SHORT_KEY = "x7Qp-short-secret"  # 17 characters


def test_a_short_plain_key_from_the_environment_stops_the_start_naming_only_the_key():
    message = config_error(environ={
        "TICKET_DISPATCHER_AUTH_API_KEYS": f"jira:viewer:{LONG_KEY},ops:operator:{SHORT_KEY}"})

    assert message == ('TICKET_DISPATCHER_AUTH_API_KEYS entry 2: key "ops" is shorter than 24 '
                       "characters; use a long random key")
    assert SHORT_KEY not in message


def test_a_short_plain_key_in_the_file_stops_the_start_naming_only_the_key(write_toml):
    path = write_toml(f'[[auth.api_keys]]\nname = "ops"\nrole = "operator"\nkey = "{SHORT_KEY}"\n')

    message = config_error(path)

    assert message.startswith('auth.api_keys[0].key: key "ops" is shorter than 24 characters')
    assert SHORT_KEY not in message


def test_a_key_of_24_characters_is_accepted():
    key = "k" * 24

    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": f"ops:operator:{key}"})

    assert config.auth.api_keys == (ApiKey("ops", AccessRole.OPERATOR, sha256(key)),)


def test_a_hashed_key_with_a_trailing_newline_is_refused(write_toml):
    path = write_toml(f'[[auth.api_keys]]\nname = "a"\nrole = "viewer"\n'
                      f'key_sha256 = "{sha256("x")}\\n"\n')

    assert "auth.api_keys[0].key_sha256: expected 64 hexadecimal characters" in config_error(path)


def test_http_limits_are_read_from_the_file(write_toml):
    path = write_toml('[http]\nconnection_limit = 200\nchannel_timeout = "1s"\n'
                      "max_json_depth = 8\n[auth]\nfailure_rate = 0\nfailure_burst = 0\n")

    config = load_config(path, environ={})

    assert (config.http.connection_limit, config.http.channel_timeout,
            config.http.max_json_depth) == (200, timedelta(seconds=1), 8)
    assert (config.auth.failure_rate, config.auth.failure_burst) == (0, 0)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[http]\nmax_json_depth = 1000",
         "http.max_json_depth: expected an integer between 8 and 512"),
        ("[http]\nconnection_limit = 5", "http.connection_limit: expected an integer between 10"),
        ('[http]\nchannel_timeout = "500ms"',
         'http.channel_timeout: expected a duration between "1s" and "1h", got "500ms"'),
        ('[http]\nchannel_timeout = "2h"', "http.channel_timeout: expected a duration between"),
        ("[auth]\nfailure_burst = 0", "auth.failure_burst: must be at least 1 while"),
        ("[auth]\nfailure_rate = -1", "auth.failure_rate: expected a number >= 0"),
    ],
)
def test_bad_hostile_input_limits_name_the_key(write_toml, toml, expected):
    assert expected in config_error(write_toml(toml))


# --- calendar feeds ----------------------------------------------------------------------------

FEEDS_ENV = "TICKET_DISPATCHER_AVAILABILITY_FEEDS"
HR_URL = "https://hr.example.com/calendars/private-7f3a9c21/holidays.ics?token=Zq81xY0pW3"
ALICE_URL = "https://calendar.example.com/ical/alice%40example.com/private-b61e9d/basic.ics"


def test_availability_defaults():
    availability = Config().availability

    assert availability.feeds == ()
    assert availability.refresh_every == timedelta(minutes=15)
    assert (availability.max_feed_bytes, availability.max_feed_events) == (5_000_000, 20_000)
    assert availability.horizon == timedelta(days=180)


def test_feeds_from_the_file_and_the_environment_add_up(write_toml):
    path = write_toml(f'[availability]\nrefresh_every = "5m"\nhorizon = "90d"\n'
                      f'[[availability.feeds]]\nname = "hr"\nurl = "{HR_URL}"\n'
                      f'[[availability.feeds]]\nname = "alice-calendar"\nurl = "{ALICE_URL}"\n'
                      f'email = "Alice@Example.com"\n')
    environ = {FEEDS_ENV: "  bob_cal:bob@example.com=https://cal.example.com/b?x=1&y=a=b\n"
                          "office=http://intranet:8080/office.ics "}

    availability = load_config(path, environ=environ).availability

    assert availability.feeds == (
        CalendarFeed("hr", HR_URL),
        CalendarFeed("alice-calendar", ALICE_URL, "alice@example.com"),
        # split at the first "=": the rest is the URL
        CalendarFeed("bob_cal", "https://cal.example.com/b?x=1&y=a=b", "bob@example.com"),
        CalendarFeed("office", "http://intranet:8080/office.ics"),
    )
    assert (availability.refresh_every, availability.horizon) == (
        timedelta(minutes=5), timedelta(days=90))


def test_an_empty_feeds_variable_configures_no_feed():
    assert load_config(None, environ={FEEDS_ENV: " "}).availability.feeds == ()


@pytest.mark.parametrize(("toml", "expected"), [
    ('[availability]\nfeeds = "hr"', "availability.feeds: expected an array of tables"),
    ('[[availability.feeds]]\nname = "HR"\nurl = "https://x.example.com/a"',
     "availability.feeds[0].name: expected a name of 1 to 64 characters of a-z, 0-9, _ and -"),
    ('[[availability.feeds]]\nname = "-hr"\nurl = "https://x.example.com/a"',
     "availability.feeds[0].name: expected a name"),
    (f'[[availability.feeds]]\nname = "{"h" * 65}"\nurl = "https://x.example.com/a"',
     "availability.feeds[0].name: expected a name"),
    ('[[availability.feeds]]\nname = "api"\nurl = "https://x.example.com/a"',
     'availability.feeds[0].name: the name "api" is reserved for time off entered through '
     'the API'),
    ('[[availability.feeds]]\nurl = "https://x.example.com/a"',
     "availability.feeds[0].name: expected a name"),
    ('[[availability.feeds]]\nname = "hr"\nurl = "ftp://x.example.com/a"',
     "availability.feeds[0].url: expected an http:// or https:// URL"),
    ('[[availability.feeds]]\nname = "hr"\nurl = "https:///no-host"',
     "availability.feeds[0].url: expected an http:// or https:// URL"),
    ('[[availability.feeds]]\nname = "hr"\nurl = "https://x.example.com/a"\nemail = "alice"',
     "availability.feeds[0].email: expected an email address"),
    ('[[availability.feeds]]\nname = "hr"\nurl = "https://x.example.com/a"\nmail = "a@b.c"',
     "availability.feeds[0].mail: unknown key (did you mean email?)"),
    ('[[availability.feeds]]\nname = "hr"\nurl = "https://x.example.com/a"\n'
     '[[availability.feeds]]\nname = "hr"\nurl = "https://y.example.com/b"',
     'availability.feeds: duplicate feed name "hr"'),
    ('[availability]\nrefresh_every = "30s"',
     'availability.refresh_every: expected a duration between "1m" and "1d"'),
    ('[availability]\nmax_feed_events = 0', "availability.max_feed_events: expected an integer"),
])
def test_bad_feed_settings_name_the_key(write_toml, toml, expected):
    assert expected in config_error(write_toml(toml))


@pytest.mark.parametrize(("text", "expected"), [
    (f"hr{ALICE_URL}", f"{FEEDS_ENV} entry 1: expected name=url or name:email=url"),
    (f"hr={HR_URL} API={HR_URL}", f"{FEEDS_ENV} entry 2: expected a name of 1 to 64"),
    (f"api={HR_URL}", f'{FEEDS_ENV} entry 1: the name "api" is reserved'),
    (f"alice:alice={HR_URL}", f'{FEEDS_ENV} entry 1: feed "alice": expected an email address'),
    ("hr=file:///etc/passwd", f'{FEEDS_ENV} entry 1: feed "hr": expected an http:// or '
                              f'https:// URL'),
    (f"hr={HR_URL} hr={ALICE_URL}", 'availability.feeds: duplicate feed name "hr"'),
])
def test_bad_feed_entries_in_the_environment_name_the_entry(text, expected):
    assert expected in config_error(environ={FEEDS_ENV: text})


@pytest.mark.parametrize("environ", [
    {FEEDS_ENV: f"{HR_URL}"},  # no name: the whole entry may be the URL
    {FEEDS_ENV: f"H R={HR_URL}"},
    {FEEDS_ENV: f"hr={HR_URL} ftp={HR_URL.replace('https', 'ftp')}"},
    {FEEDS_ENV: f"hr:nobody={HR_URL}"},
])
def test_a_feed_url_never_appears_in_an_error_message(environ):
    message = config_error(environ=environ)

    assert "private-7f3a9c21" not in message and "Zq81xY0pW3" not in message


def test_a_feed_url_in_a_bad_file_entry_never_appears_in_an_error_message(write_toml):
    path = write_toml(f'[[availability.feeds]]\nname = "API"\nurl = "{HR_URL}"\n'
                      f'[[availability.feeds]]\nname = "x"\nurl = "{HR_URL} "\n')

    message = config_error(path)

    assert "availability.feeds[1].url" in message and "private-7f3a9c21" not in message


def test_config_show_prints_only_the_scheme_and_host_of_a_feed():
    config = load_config(None, environ={
        FEEDS_ENV: f"hr={HR_URL} alice:alice@example.com=https://u:pw@cal.example.com:8443/x"})

    shown = masked(config)["availability"]

    assert shown["feeds"] == [
        {"name": "hr", "url": "https://hr.example.com", "email": None},
        {"name": "alice", "url": "https://cal.example.com:8443", "email": "alice@example.com"},
    ]
    assert "private" not in json.dumps(masked(config)) and "pw" not in json.dumps(shown)
    assert HR_URL not in repr(config)


def test_feed_urls_their_paths_and_queries_are_secrets_for_the_log():
    config = load_config(None, environ={
        FEEDS_ENV: f"hr={HR_URL} alice:alice@example.com={ALICE_URL} short=https://x.io/a.ics"})

    secrets = config.secrets()

    assert {HR_URL, "/calendars/private-7f3a9c21/holidays.ics", "token=Zq81xY0pW3",
            ALICE_URL, "/ical/alice%40example.com/private-b61e9d/basic.ics",
            "/ical/alice@example.com/private-b61e9d/basic.ics",  # as a log may decode it
            "https://x.io/a.ics"} <= set(secrets)
    # a path too short to carry a token is not masked on its own: it would cut up other lines
    assert "/a.ics" not in secrets


def test_a_bare_zero_is_a_zero_duration_where_the_range_starts_at_zero(write_toml):
    from_file = load_config(write_toml("intake_priority = 0\n[database]\nbusy_timeout = 0\n"),
                            environ={})
    from_environment = load_config(None, environ={"TICKET_DISPATCHER_INTAKE_PRIORITY": "0",
                                                  "TICKET_DISPATCHER_CLUSTER_DRAIN": "0"})

    assert from_file.intake_priority == from_file.database.busy_timeout == timedelta(0)
    assert from_environment.intake_priority == from_environment.cluster.drain == timedelta(0)
    # where a duration must be positive, zero is refused as before
    assert "TRIGGER_POLL_INTERVAL: expected a positive duration" in config_error(
        None, {"TICKET_DISPATCHER_TRIGGER_POLL_INTERVAL": "0"})
