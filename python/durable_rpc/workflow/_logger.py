"""``workflow.logger``: a logger that stays silent while history is being replayed.

Replaying re-executes code that already ran (and logged) once; repeating its log lines
on every workflow task would make logs useless. Records carry the workflow and run ids.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from durable_rpc.workflow._api import current, in_workflow


class ReplayAwareLogger(logging.LoggerAdapter[logging.Logger]):
    def isEnabledFor(self, level: int) -> bool:
        if in_workflow() and current().is_replaying:
            return False
        return self.logger.isEnabledFor(level)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        if in_workflow() and current().info is not None:
            info = current().current_info()
            extra = dict(kwargs.get("extra") or {})
            extra.setdefault("workflow_id", info.workflow_id)
            extra.setdefault("run_id", info.run_id)
            kwargs["extra"] = extra
        return msg, kwargs


logger = ReplayAwareLogger(logging.getLogger("durable_rpc.workflow.user"), {})
