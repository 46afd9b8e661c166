"""RocketMQ's SubscriptionData, as a consumer's heartbeat and CHECK_CLIENT_CONFIG carry it:

```
{"topic": "Orders", "subString": "TagA || TagB", "expressionType": "TAG", "subVersion": 1700000000000,
 "tagsSet": ["TagA", "TagB"], "codeSet": [<tagsCode of each>], "classFilterMode": false}
```

An SQL92 subscription has its selector as ``subString`` and empty tag and code sets.
"""

from __future__ import annotations

from typing import Any

from core.filter.expression_types import TAG
from formats.tags import subscription_codes


def subscription_data(topic: str, expression: str, expression_type: str = TAG, version: int = 0) -> dict[str, Any]:
    tagged = expression_type == TAG and expression != "*"
    return {"topic": topic, "subString": expression, "subVersion": version,
            "tagsSet": [t.strip() for t in expression.split("||")] if tagged else [],
            "codeSet": sorted(subscription_codes(expression) or []) if tagged else [],
            "expressionType": expression_type, "classFilterMode": False}
