"""What the keys filter holds (see `keys_filter`): the enforcer's tables, from the same feed and indexed the
same way (a digest several keys share is left out, a blocked subscription wins), plus the API of each route.

Only digests travel: the filter hashes what a caller presents and looks that up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.feeds import enforcer_feed
from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE
from meshplane.enforcer.snapshot import index_apis, index_keys, index_subscriptions


def keys_table(apis: Iterable[Api], entitlements: Entitlements, routes: Mapping[str, str]) -> dict[str, Any]:
    """The table for the routes `routes` (route name -> `project/name` of its API)."""
    feed = enforcer_feed(apis, entitlements)
    by_api, _ = index_apis(feed[ENFORCER_API_TYPE].values())
    by_digest, _ = index_keys(feed[ENFORCER_APPLICATION_TYPE].values())
    by_subscription, _ = index_subscriptions(feed[ENFORCER_SUBSCRIPTION_TYPE].values())
    return {
        "routes": dict(sorted(routes.items())),
        "apis": {
            name: {"project": api.project, "name": api.name, "header": api.key_header, "query": api.key_query}
            for name, api in sorted(by_api.items())
        },
        "keys": {
            digest.hex(): {
                "project": key.project,
                "application": key.application,
                "id": key.key_id,
                "expires": key.expires_unix,
            }
            for digest, key in sorted(by_digest.items())
        },
        "subscriptions": {
            f"{project}/{application}/{api}": {"plan": sub.plan, "active": sub.active}
            for (project, application, api), sub in sorted(by_subscription.items())
        },
    }
