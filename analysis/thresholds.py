"""The thresholds and caps of the incident analysis (``analysis.incident``), in one place.

Every number here is general: it describes incidents, not any one system or dataset. A caller can
override any of them for one analysis through ``AnalysisSettings`` (same names, lower case).

Windows
    With no time given, the incident window is the last ``DEFAULT_INCIDENT_MINUTES`` before the
    newest item of data and the baseline the ``DEFAULT_BASELINE_MINUTES`` before that.

Log rates
    A count is turned into a rate per *covered* minute: the minutes of a window in which any log
    line at all was read. A source that captured only part of a window (a sampled capture, a file
    that starts late) is then compared fairly, and a window with no coverage is a gap.

Signals (each one has a strength in 0..1; a service's evidence is the sum of its strongest
``MAX_SIGNALS`` strengths times their kind's weight, and a score is ``1 - exp(-evidence)``;
a series deviation that several services share is divided by the square root of their number)
    - error surge: the error (or warning) rate rose at least ``SURGE_RATIO`` times over the
      baseline (one extra event per baseline window added as a floor), with at least
      ``MIN_EVENTS`` events in the incident window. When traces give the requests the service
      served in both windows (at least ``MIN_SPANS`` each), the rate is per request instead of
      per minute and ``REQUEST_SURGE_RATIO`` makes the surge: lines that track the traffic (a
      warning logged for every request of some kind) keep their share of requests however the
      load moves, and without the swing of the load a smaller rise already stands out. The
      count that matters is the excess: the lines beyond what the baseline's rate predicts
      for the incident window must reach ``MIN_EVENTS`` (a line or two more is chance);
    - new template: a message template never seen in the baseline, at least ``MIN_NEW_EVENTS``
      times (error and warning templates weigh most; other levels only when the text names a
      failure);
    - template jump: a known template whose rate rose ``SURGE_RATIO`` times (per request:
      ``REQUEST_SURGE_RATIO``, as for error surges);
    - in all three, a warning or error line that names another service of the data reports a
      call to that service failing as its writer saw it (unreachable, not found, answering
      errors): such lines weigh ``NAMED_SERVICE_FACTOR`` on the writer (the share of them);
    - series: an incident point at least ``SERIES_Z`` robust deviations (median absolute
      deviation, floored at ``SERIES_REL_FLOOR`` of the median) from the baseline median, in the
      bad direction of the metric, and a relative change of at least ``SERIES_MIN_CHANGE``; the
      onset is the first such point; an error or success ratio must also move by at least
      ``ERROR_RATIO_MIN_DELTA`` (one point: 0.01 of a fraction, 1 of a percentage), a CPU or
      memory usage by ``USAGE_MIN_DELTA`` (ten points), a latency by ``LATENCY_MIN_MS``; the
      strength is the lesser of the deviation's and the relative change's;
    - trace latency: a service's served spans' p90 (or its own time, children excluded) rose
      ``LATENCY_RATIO`` times and by at least ``LATENCY_MIN_MS``, over ``MIN_SPANS`` spans;
      and the time between two services on a call (the caller's span minus the callee's) whose
      median rose as much, given to the service the slow calls share, its onset the first call
      slower than the baseline's median by ``LATENCY_MIN_MS``. A stated start is often late:
      calls of the last ``EARLY_ONSET_S`` of the baseline that all look like the incident's
      (at least its median over ``LATENCY_RATIO``) join the incident, its onset then before the
      window, when ``EARLY_ONSET_MIN_USUAL`` calls before them still say what usual was;
    - trace errors: the error ratio of a service's spans rose by ``ERROR_RATIO_DELTA``;
    - call pattern (``analysis.trace_patterns``): per kind of service visit (service and entry
      operation, ``MIN_SPANS`` visits in each window), an event (local operation, call out, log
      line) that at least ``PATTERN_COMMON_SHARE`` of the baseline visits held and whose share
      halved, or a failure event no baseline visit held in ``MIN_EVENTS`` incident visits, when
      its surprise (incident visits times the relative entropy of the two shares, in nats: the
      Chernoff exponent of the binomial tail) reaches ``PATTERN_SURPRISE`` (about a chance in a
      thousand); the deepest diverging visit of each request takes the blame, the strength is
      0.5 at ``PATTERN_SURPRISE`` and 1.0 at eight times it, over at least ``MIN_EVENTS`` requests.
      As for latency, a stated start is often late: the visits of the last ``EARLY_ONSET_S`` of
      the baseline that all lack a usual event join the incident (the onset then before the
      window) when at least ``MIN_SPANS`` visits before them remain; since that cut is chosen by
      looking at the data, the share those visits leave is taken at the lower end of its 95 %
      (Wilson) interval. On the development faults this named the injected service of two
      faults whose service had stopped writing a line a minute before the stated start.
      It weighs 1.5 where the other kinds weigh at most 1.0: it is located already (the deepest
      departing visit of each request), where an error or latency change also shows at every
      caller up the chain. On the development faults, weights 1.0, 1.2, 1.5 and 2.0 named the
      injected service first in 76, 84, 88 and 88 % of them, none lost to a call pattern.

Propagation and ranking
    A service is anomalous when its combined strength reaches ``ANOMALY_MIN``. An anomalous
    service that calls (directly or through other services) an anomalous service whose onset
    is no later than its own plus ``ONSET_TOLERANCE_S`` (``ONSET_TOLERANCE_PRECISE_S`` when both
    onsets come from log lines or spans, not from series points a minute apart), and whose
    evidence is at least ``EXPLAIN_MIN_SHARE`` of its own or whose slow calls from this very
    caller are among its signals, is explained by it (a symptom): its score evidence is
    multiplied by ``SYMPTOM_FACTOR`` and held to at most ``SYMPTOM_FACTOR`` of its strongest
    cause's (a caller that logs loudly about the callee failing it stays below that callee). A
    suspect's evidence gains ``EXPLAIN_BONUS`` times the evidence of each service it explains
    (shared among that service's causes), and ``CHANGE_BONUS`` for a change event on it within
    ``CHANGE_LEAD_S`` before (or during) its onset. The top suspect is the root cause when its
    score is at least ``ROOT_MIN_SCORE`` and the next one's evidence is below ``1 - ROOT_MARGIN``
    of its own; otherwise the report says the evidence does not single one out.

Caps (an analysis is bounded in time and memory whatever it is given)
    at most ``MAX_LOGS`` log lines, ``MAX_SPANS`` spans, ``MAX_SERIES`` series with ``MAX_POINTS``
    points each, ``MAX_ALERTS`` alerts; beyond that the newest are kept and the cut is stated as a
    gap. At most ``MAX_SUSPECTS`` suspects, ``MAX_SIGNALS`` signals per suspect,
    ``MAX_EVIDENCE`` evidence pointers per signal and ``MAX_CHANGES`` changes are reported.
"""

from __future__ import annotations

from typing import Final

DEFAULT_INCIDENT_MINUTES: Final = 15
DEFAULT_BASELINE_MINUTES: Final = 60

MIN_EVENTS: Final = 3
MIN_NEW_EVENTS: Final = 2
SURGE_RATIO: Final = 3.0
REQUEST_SURGE_RATIO: Final = 1.5
NAMED_SERVICE_FACTOR: Final = 0.5

SERIES_Z: Final = 4.0
SERIES_REL_FLOOR: Final = 0.1
SERIES_MIN_CHANGE: Final = 0.5
SERIES_MIN_BASELINE_POINTS: Final = 3
ERROR_RATIO_MIN_DELTA: Final = 0.01
USAGE_MIN_DELTA: Final = 0.1

LATENCY_RATIO: Final = 2.0
LATENCY_MIN_MS: Final = 50.0
MIN_SPANS: Final = 5
ERROR_RATIO_DELTA: Final = 0.1
EARLY_ONSET_S: Final = 300.0
EARLY_ONSET_MIN_USUAL: Final = 2
PATTERN_COMMON_SHARE: Final = 0.3
PATTERN_SURPRISE: Final = 7.0

ANOMALY_MIN: Final = 0.3
ONSET_TOLERANCE_S: Final = 60.0
ONSET_TOLERANCE_PRECISE_S: Final = 15.0
EXPLAIN_MIN_SHARE: Final = 0.5
SYMPTOM_FACTOR: Final = 0.5
EXPLAIN_BONUS: Final = 0.3
CHANGE_BONUS: Final = 0.5
CHANGE_LEAD_S: Final = 1800.0
ROOT_MIN_SCORE: Final = 0.3
ROOT_MARGIN: Final = 0.1

MAX_LOGS: Final = 400_000
MAX_SPANS: Final = 400_000
MAX_SERIES: Final = 2_000
MAX_POINTS: Final = 2_000
MAX_ALERTS: Final = 1_000
MAX_SUSPECTS: Final = 10
MAX_SIGNALS: Final = 8
MAX_EVIDENCE: Final = 3
MAX_CHANGES: Final = 20
MAX_TEMPLATES: Final = 5_000
