"""The program's settings that are neither run settings nor evidence sources: one declaration each.

The run settings are the fields of ``Context`` (``state/context.py``) and the evidence sources'
settings are declared in ``evidence/config.py``; everything else a process reads is declared
here: the model endpoint, the database and its upkeep, the HTTP API, its alert receiver, the
LangGraph server and the command line. The modules that use a setting read it with
``state.configuration.value(SETTING)`` and turn an error into their own kind where they must.
"""

from __future__ import annotations

from state.configuration import Sources
from state.settings import (
    Amount,
    AtLeast,
    Count,
    HttpUrl,
    Listed,
    RunCheck,
    Setting,
    SettingsError,
    Switch,
    Text,
)

# --------------------------------------------------------------------------- the model endpoint

MODEL_API_KEY = Setting(
    "model_api_key",
    "OPENAI_API_KEY",
    Text(),
    "API key of the OpenAI-compatible endpoint (any value for a local one); when unset, "
    "diagnoses run offline",
    secret=True,
)
MODEL_BASE_URL = Setting(
    "model_base_url",
    "OPENAI_BASE_URL",
    Text(),
    "OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 for Ollama",
    shown_default="OpenAI's",
)


MODEL_PROFILE = Setting(
    "model_profile",
    "SUPERBIZ_MODEL_PROFILE",
    RunCheck("choice", choices=("hosted", "local")),
    "hosted, or local for a model on your own CPU or small GPU: longer request and diagnosis "
    "timeouts (SUPERBIZ_MODEL_TIMEOUT_S, SUPERBIZ_DIAGNOSIS_DEADLINE_S), and the executor "
    "guided: it answers once the plan's steps had their tool calls, its answer's citations "
    "limited to the refs recorded for the diagnosis",
    default="hosted",
)

LOCAL_MODEL_TIMEOUT_S = 600.0
"""Seconds per model request under the local profile (a CPU generates 5 to 25 tokens/s)."""
LOCAL_DIAGNOSIS_DEADLINE_S = 1800.0
"""Seconds of model calls per diagnosis under the local profile."""


def local_profile(sources: Sources | None = None) -> bool:
    """Whether ``SUPERBIZ_MODEL_PROFILE`` is ``local``."""
    return bool((sources or Sources()).value(MODEL_PROFILE) == "local")


def _max_tokens(role: str, default: int, what: str) -> Setting:
    return Setting(
        f"{role}_max_tokens",
        f"SUPERBIZ_{role.upper()}_MAX_TOKENS",
        AtLeast(16),
        f"output tokens one {role} request may generate (max_tokens, sent with every "
        f"request): {what}",
        default=default,
    )


PLANNER_MAX_TOKENS = _max_tokens("planner", 400, "a plan of at most 6 steps")
EXECUTOR_MAX_TOKENS = _max_tokens("executor", 2000, "tool calls, or the final claims object")
VERIFIER_MAX_TOKENS = _max_tokens("verifier", 2000, "one label and a line per claim")
COMPOSER_MAX_TOKENS = _max_tokens("composer", 600, "a two-sentence summary and its lists")
MAX_TOKENS: dict[str, Setting] = {
    "planner": PLANNER_MAX_TOKENS,
    "executor": EXECUTOR_MAX_TOKENS,
    "verifier": VERIFIER_MAX_TOKENS,
    "composer": COMPOSER_MAX_TOKENS,
}
"""Each role's output token limit."""


def models_configured(sources: Sources | None = None) -> bool:
    """Whether a model endpoint can be used: ``OPENAI_API_KEY`` is set.

    This is the offline rule's one home: without a key a diagnosis runs offline unless
    ``SUPERBIZ_OFFLINE`` or a caller says otherwise (``Context.offline``).
    """
    return (sources or Sources()).text(MODEL_API_KEY.variable) is not None


# --------------------------------------------------------------------------- database and upkeep

DATABASE_URL = Setting(
    "database_url",
    "SUPERBIZ_DATABASE_URL",
    Text(),
    "the database: postgresql://user@host:5432/db, sqlite:///file.sqlite or a file path "
    "(or --db URL)",
    shown_default="an SQLite file in the user data directory",
)
DB_POOL_SIZE = Setting(
    "db_pool_size",
    "SUPERBIZ_DB_POOL_SIZE",
    Count(floor=1),
    "PostgreSQL connections per worker process",
    default=10,
)
LEASE_TTL_S = Setting(
    "lease_ttl_s",
    "SUPERBIZ_LEASE_TTL_S",
    Amount("seconds", floor=0.5),
    "seconds a running diagnosis's lease lasts without a heartbeat (renewed every third of it)",
    default=60.0,
)
SWEEP_INTERVAL_S = Setting(
    "sweep_interval_s",
    "SUPERBIZ_SWEEP_INTERVAL_S",
    Amount("seconds", floor=0.0),
    "seconds between a server's sweeps (0: only at start)",
    default=30.0,
)
RETENTION_DAYS = Setting(
    "retention_days",
    "SUPERBIZ_RETENTION_DAYS",
    Amount("days", minimum=0),
    "servers prune checkpoints of threads finished more than N days ago, hourly",
)

# --------------------------------------------------------------------------- the HTTP API

API_KEYS = Setting(
    "api_keys",
    "SUPERBIZ_API_KEYS",
    Text(),
    "API keys as key=identity pairs separated by commas; none: open access as anonymous",
    secret=True,
)
API_KEYS_FILE = Setting(
    "api_keys_file",
    "SUPERBIZ_API_KEYS_FILE",
    Text(),
    "a file of key=identity lines (# comments and blank lines ignored)",
)
API_MAX_QUESTION_CHARS = Setting(
    "api_max_question_chars",
    "SUPERBIZ_API_MAX_QUESTION_CHARS",
    AtLeast(1),
    "longest question (longer: 422)",
    default=4000,
)
API_MAX_BODY_BYTES = Setting(
    "api_max_body_bytes",
    "SUPERBIZ_API_MAX_BODY_BYTES",
    AtLeast(1024),
    "largest request body (larger: 413)",
    default=64 * 1024,
)
API_BODY_TIMEOUT_S = Setting(
    "api_body_timeout_s",
    "SUPERBIZ_API_BODY_TIMEOUT_S",
    Amount("seconds", floor=0.1),
    "seconds a client has to send its whole request body (slower: 408, connection closed)",
    default=15.0,
)
API_RATE_PER_MIN = Setting(
    "api_rate_per_min",
    "SUPERBIZ_API_RATE_PER_MIN",
    AtLeast(0),
    "requests per minute per key (0: no limit), per worker process",
    default=60,
)
API_RATE_BURST = Setting(
    "api_rate_burst",
    "SUPERBIZ_API_RATE_BURST",
    AtLeast(1),
    "requests a key may make at once",
    shown_default="the rate",
)
API_MAX_RUNS = Setting(
    "api_max_runs",
    "SUPERBIZ_API_MAX_RUNS",
    AtLeast(1),
    "diagnoses running at once per worker; further requests wait their turn",
    shown_default="PostgreSQL: (pool size - 1) / 3, at least 1; SQLite: 4",
)


def _origin(item: str, label: str) -> str:
    if item == "*" or "://" not in item:
        raise SettingsError(
            [
                f"{label}: {item!r} is not an origin; list origins such as "
                "https://ops.example.com (a wildcard is not accepted)"
            ]
        )
    return item


API_CORS_ORIGINS = Setting(
    "api_cors_origins",
    "SUPERBIZ_API_CORS_ORIGINS",
    Listed(item=_origin),
    "origins a browser may call the API from (comma-separated; * is refused)",
    default=(),
)
API_ALLOWED_HOSTS = Setting(
    "api_allowed_hosts",
    "SUPERBIZ_API_ALLOWED_HOSTS",
    Listed(lower=True),
    "without keys: host names accepted in Host besides localhost, 127.0.0.1, [::1]",
    default=(),
)
MCP_API_KEY = Setting(
    "mcp_api_key",
    "SUPERBIZ_MCP_API_KEY",
    Text(),
    "with keys: the API key `superbiz mcp` (MCP over stdio) acts for; its identity owns the "
    "diagnoses",
    secret=True,
)
STUDIO_IDENTITY = Setting(
    "studio_identity",
    "SUPERBIZ_STUDIO_IDENTITY",
    Text(),
    "the identity LangGraph Studio's requests from a loopback address act as, when keys are "
    "configured",
)

# --------------------------------------------------------------------------- alerts

ALERT_CONCURRENCY = Setting(
    "alert_concurrency",
    "SUPERBIZ_ALERT_CONCURRENCY",
    AtLeast(1, "digits"),
    "alert diagnoses running at once per server process",
    default=2,
)
ALERT_QUEUE_MAX = Setting(
    "alert_queue_max",
    "SUPERBIZ_ALERT_QUEUE_MAX",
    AtLeast(1, "digits"),
    "investigations that may wait; more: 429",
    default=100,
)
ALERT_WINDOW_MARGIN_S = Setting(
    "alert_window_margin_s",
    "SUPERBIZ_ALERT_WINDOW_MARGIN_S",
    AtLeast(0, "float"),
    "how long before the earliest startsAt the diagnosis looks",
    default=900.0,
)
ALERT_MAX_BODY_BYTES = Setting(
    "alert_max_body_bytes",
    "SUPERBIZ_ALERT_MAX_BODY_BYTES",
    AtLeast(1024, "digits"),
    "largest notification (larger: 413)",
    default=1024 * 1024,
)
ALERT_CLAIM_S = Setting(
    "alert_claim_s",
    "SUPERBIZ_ALERT_CLAIM_S",
    AtLeast(1, "float"),
    "a running investigation's claim; renewed while its process lives",
    default=30.0,
)
ALERT_MAX_ATTEMPTS = Setting(
    "alert_max_attempts",
    "SUPERBIZ_ALERT_MAX_ATTEMPTS",
    AtLeast(1, "digits"),
    "times an investigation is taken before it is failed",
    default=3,
)
NOTIFY_WEBHOOK_URL = Setting(
    "notify_webhook_url",
    "SUPERBIZ_NOTIFY_WEBHOOK_URL",
    HttpUrl(),
    'where finished answers are POSTed as {"text": ...}',
    secret=True,  # an incoming webhook's URL is its credential
)
NOTIFY_ATTEMPTS = Setting(
    "notify_attempts",
    "SUPERBIZ_NOTIFY_ATTEMPTS",
    AtLeast(1, "digits"),
    "delivery attempts before a notification is given up",
    default=5,
)
NOTIFY_RETRY_S = Setting(
    "notify_retry_s",
    "SUPERBIZ_NOTIFY_RETRY_S",
    AtLeast(0, "float"),
    "delay before the first retry, doubling after each failure",
    default=10.0,
)
PUBLIC_URL = Setting(
    "public_url",
    "SUPERBIZ_PUBLIC_URL",
    HttpUrl(trim=True),
    "the API's address in the notification's link",
    shown_default="the address Alertmanager used",
)

# --------------------------------------------------------------------------- the command line

DEBUG = Setting(
    "debug",
    "SUPERBIZ_DEBUG",
    Switch(),
    "1 prints the traceback of a failure before its one-line error",
    default=False,
)

SETTINGS: tuple[Setting, ...] = (
    MODEL_API_KEY,
    MODEL_BASE_URL,
    MODEL_PROFILE,
    PLANNER_MAX_TOKENS,
    EXECUTOR_MAX_TOKENS,
    VERIFIER_MAX_TOKENS,
    COMPOSER_MAX_TOKENS,
    DATABASE_URL,
    DB_POOL_SIZE,
    LEASE_TTL_S,
    SWEEP_INTERVAL_S,
    RETENTION_DAYS,
    API_KEYS,
    API_KEYS_FILE,
    API_MAX_QUESTION_CHARS,
    API_MAX_BODY_BYTES,
    API_BODY_TIMEOUT_S,
    API_RATE_PER_MIN,
    API_RATE_BURST,
    API_MAX_RUNS,
    API_CORS_ORIGINS,
    API_ALLOWED_HOSTS,
    MCP_API_KEY,
    STUDIO_IDENTITY,
    ALERT_CONCURRENCY,
    ALERT_QUEUE_MAX,
    ALERT_WINDOW_MARGIN_S,
    ALERT_MAX_BODY_BYTES,
    ALERT_CLAIM_S,
    ALERT_MAX_ATTEMPTS,
    NOTIFY_WEBHOOK_URL,
    NOTIFY_ATTEMPTS,
    NOTIFY_RETRY_S,
    PUBLIC_URL,
    DEBUG,
)
"""Every setting declared here, in the order ``config show`` prints them."""
