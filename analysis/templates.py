"""Log message templates, mined with Drain (the maintained ``drain3`` implementation).

``TemplateIndex`` feeds messages in the order given and names each one's template; templates are
read after all messages are in (Drain widens a template as it sees more of its messages, so the
final template is the one reported). Variable parts are masked before mining: UUIDs, long hex
ids, IP addresses, e-mail addresses, numbers.
"""

from __future__ import annotations

import logging
from typing import Final

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

from analysis import thresholds
from state.display import one_line

_MASKS: Final = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "UUID"),
    (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", "IP"),
    (r"[\w.+-]+@[\w-]+\.[\w.-]+", "EMAIL"),
    (r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b", "HEX"),
    (r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])", "NUM"),
)
_MAX_MESSAGE_CHARS: Final = 2_000

# drain3 announces every cluster it creates at INFO; keep it out of the program's own log.
logging.getLogger("drain3").setLevel(logging.WARNING)


class TemplateIndex:
    """Message -> template id, with each template's final text."""

    def __init__(self, max_templates: int = thresholds.MAX_TEMPLATES) -> None:
        """A fresh index that keeps at most ``max_templates`` templates (Drain's LRU)."""
        config = TemplateMinerConfig()
        config.masking_instructions = [MaskingInstruction(p, name) for p, name in _MASKS]
        config.drain_sim_th = 0.5
        config.drain_depth = 4
        config.drain_max_clusters = max_templates
        config.profiling_enabled = False
        self._miner = TemplateMiner(config=config)

    def add(self, message: str) -> int:
        """Mine one message; return its template id."""
        text = one_line(message[:_MAX_MESSAGE_CHARS])
        result = self._miner.add_log_message(text)
        return int(result["cluster_id"])

    def template(self, template_id: int) -> str:
        """The final text of a template (empty when Drain evicted it)."""
        cluster = self._miner.drain.id_to_cluster.get(template_id)
        return "" if cluster is None else str(cluster.get_template())
