"""Change events read from log messages: deploys, restarts, configuration, migrations, jobs.

General vocabulary in English and Chinese; a message matches a category when one of its phrases
appears (case-insensitive, on word boundaries for English). The categories: ``deploy``
(deploys, rollouts, releases, upgrades, rollbacks, new versions), ``restart`` (restarts,
process or container start-up), ``config`` (configuration and feature-flag changes, reloads),
``migration`` (schema and data migrations), ``job`` (batch or scheduled jobs started),
``scaling`` (scale up/down, replicas).
"""

from __future__ import annotations

import re
from typing import Final

_CATEGORIES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "deploy",
        re.compile(
            r"\b(?:deploy(?:ed|ing|ment)?|roll(?:ing)?[ -]?out|rolled out|rollback|rolled back|"
            r"release[d]? (?:version|v?\d)|upgrad(?:e|ed|ing) (?:to|from)|new version|"
            r"version \S+ (?:is )?(?:live|deployed))\b"
            r"|部署|发布|上线|回滚|灰度|升级到|新版本",
            re.IGNORECASE,
        ),
    ),
    (
        "restart",
        re.compile(
            r"\b(?:(?:restart(?:ed|ing)?|reboot(?:ed|ing)?)\s+(?:the\s+)?(?:service|pod|container|"
            r"application|app|server|process|instance|node|worker|jvm)|(?:pod|container|service|"
            r"application|instance|process|server|node)\s+(?:was\s+|has\s+been\s+|is\s+)?"
            r"(?:restarted|rebooted|restarting)|started \S+ in \d|application started|"
            r"starting (?:service|server|application)|shutting down|shutdown (?:hook|initiated)|"
            r"container (?:started|killed)|oomkilled|back-?off restarting)\b"
            r"|重启|启动完成|正在启动|服务启动|停机|被杀",
            re.IGNORECASE,
        ),
    ),
    (
        "config",
        re.compile(
            r"\b(?:config(?:uration)? (?:changed|updated|reloaded|change|update|reload)|"
            r"(?:changed|updated|reloaded) config(?:uration)?|feature[ -]?flag|"
            r"flag \S+ (?:enabled|disabled|turned on|turned off|set to)|toggle[d]? \S+ (?:on|off)|"
            r"property \S+ (?:changed|set to)|setting \S+ (?:changed|set to))\b"
            r"|配置(?:变更|更新|修改|已更新|重新加载)|开关|功能标志|参数(?:调整|修改)",
            re.IGNORECASE,
        ),
    ),
    (
        "migration",
        re.compile(
            r"\b(?:migrat(?:e|ed|ing|ion)|schema (?:change|update)|alter table|flyway|liquibase|"
            r"reindex(?:ing)?|backfill(?:ing)?)\b"
            r"|迁移|表结构变更|数据修复|重建索引",
            re.IGNORECASE,
        ),
    ),
    (
        "job",
        re.compile(
            r"\b(?:start(?:ed|ing|s)?|kick(?:ed|ing)? off|launch(?:ed|ing)?|trigger(?:ed)?|"
            r"began|begins)\b[^.;\n]{0,40}?\b(?:job|task|batch|cron|reconciliation|backfill|"
            r"full[- ]table)\b|\b(?:job|task|batch)\s+\S+\s+(?:started|launched|triggered)\b|"
            r"\bfull[- ]table (?:scan|sync|update|reconciliation)\b"
            r"|批处理|定时任务|批量任务|任务(?:开始|启动)|开始(?:对账|全量|同步|备份)|全表",
            re.IGNORECASE,
        ),
    ),
    (
        "scaling",
        re.compile(
            r"\b(?:scal(?:ed|ing) (?:up|down|out|in|to \d)|replicas? (?:changed|set to|from)|"
            r"autoscal(?:er|ing))\b|扩容|缩容|副本数",
            re.IGNORECASE,
        ),
    ),
)


def change_category(message: str) -> str | None:
    """The change category a log message announces, or None."""
    for name, pattern in _CATEGORIES:
        if pattern.search(message):
            return name
    return None
