//! The check itself, with no host calls: a request's route, key and subscription against a table.

use crate::table::{Api, Key, Table};
use sha2::{Digest, Sha256};

/// Why a request is refused: its HTTP status and the reason its caller reads (the enforcer's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    UnknownApi,
    MissingKey,
    InvalidKey,
    ExpiredKey,
    NotSubscribed,
    SubscriptionBlocked,
}

impl Denial {
    pub const ALL: [Denial; 6] = [
        Denial::UnknownApi,
        Denial::MissingKey,
        Denial::InvalidKey,
        Denial::ExpiredKey,
        Denial::NotSubscribed,
        Denial::SubscriptionBlocked,
    ];

    pub fn status(self) -> u32 {
        match self {
            Denial::UnknownApi | Denial::NotSubscribed | Denial::SubscriptionBlocked => 403,
            _ => 401,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Denial::UnknownApi => "unknown API",
            Denial::MissingKey => "missing API key",
            Denial::InvalidKey => "invalid API key",
            Denial::ExpiredKey => "expired API key",
            Denial::NotSubscribed => "not subscribed",
            Denial::SubscriptionBlocked => "subscription blocked",
        }
    }

    /// The counter's name: `meshplane_keys_<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Denial::UnknownApi => "unknown_api",
            Denial::MissingKey => "missing_key",
            Denial::InvalidKey => "invalid_key",
            Denial::ExpiredKey => "expired_key",
            Denial::NotSubscribed => "not_subscribed",
            Denial::SubscriptionBlocked => "subscription_blocked",
        }
    }

    pub fn body(self) -> String {
        serde_json::json!({ "error": self.reason() }).to_string()
    }
}

/// A caller let in: its API, key and plan.
#[derive(Debug, PartialEq, Eq)]
pub struct Allow<'a> {
    pub api: &'a Api,
    pub key: &'a Key,
    pub plan: &'a str,
}

/// The value of query parameter `name` in a request path, URL-decoded; None when absent or empty.
pub fn query_value(path: &str, name: &str) -> Option<String> {
    let query = path.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, value)| key == name && !value.is_empty())
        .map(|(_, value)| value.into_owned())
}

/// The path without query parameter `name` (every occurrence), the others left as the caller wrote them.
pub fn without_query(path: &str, name: &str) -> String {
    let Some((base, query)) = path.split_once('?') else {
        return path.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            form_urlencoded::parse(key.as_bytes()).next().map(|(k, _)| k != name).unwrap_or(true)
        })
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// The key in the API's header, else in its query parameter; None when there is none.
pub fn presented_key(api: &Api, header: impl Fn(&str) -> Option<String>, path: &str) -> Option<String> {
    if !api.header.is_empty() {
        if let Some(key) = header(&api.header).filter(|key| !key.is_empty()) {
            return Some(key);
        }
    }
    if !api.query.is_empty() {
        return query_value(path, &api.query);
    }
    None
}

/// Allow a request that carries a live key of an application subscribed to its route's API. A route the
/// table does not name is a misconfiguration and never allowed.
pub fn decide<'a>(
    table: &'a Table,
    route: &str,
    header: impl Fn(&str) -> Option<String>,
    path: &str,
    now: u64,
) -> Result<Allow<'a>, Denial> {
    let api = table
        .routes
        .get(route)
        .and_then(|name| table.apis.get(name))
        .ok_or(Denial::UnknownApi)?;
    let presented = presented_key(api, header, path).ok_or(Denial::MissingKey)?;
    // Looked up by digest: the key itself is never compared, kept or logged.
    let digest = hex::encode(Sha256::digest(presented.as_bytes()));
    let key = table
        .keys
        .get(&digest)
        .filter(|key| key.project == api.project)
        .ok_or(Denial::InvalidKey)?;
    if key.expires != 0 && key.expires <= now {
        return Err(Denial::ExpiredKey);
    }
    let subscription = table
        .subscription(&api.project, &key.application, &api.name)
        .ok_or(Denial::NotSubscribed)?;
    if !subscription.active {
        return Err(Denial::SubscriptionBlocked);
    }
    Ok(Allow { api, key, plan: &subscription.plan })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(key: &str) -> String {
        hex::encode(Sha256::digest(key.as_bytes()))
    }

    fn table() -> Table {
        let json = serde_json::json!({
            "routes": {"r1": "shop/orders", "r2": "shop/missing", "r3": "other/stock"},
            "apis": {
                "shop/orders": {"project": "shop", "name": "orders", "header": "x-api-key", "query": "apikey"},
                "other/stock": {"project": "other", "name": "stock", "header": "x-api-key"}
            },
            "keys": {
                digest("good"): {"project": "shop", "application": "web", "id": "k1"},
                digest("old"): {"project": "shop", "application": "web", "id": "k2", "expires": 100},
                digest("lone"): {"project": "shop", "application": "cli", "id": "k3"},
                digest("blocked"): {"project": "shop", "application": "bad", "id": "k4"}
            },
            "subscriptions": {
                "shop/web/orders": {"plan": "gold", "active": true},
                "shop/bad/orders": {"plan": "gold", "active": false}
            }
        });
        Table::parse(json.to_string().as_bytes()).unwrap()
    }

    fn header(value: Option<&str>) -> impl Fn(&str) -> Option<String> + '_ {
        move |name| (name == "x-api-key").then(|| value.map(str::to_string)).flatten()
    }

    #[test]
    fn a_live_key_of_a_subscriber_is_allowed_with_its_plan() {
        let table = table();
        let allow = decide(&table, "r1", header(Some("good")), "/orders", 50).unwrap();
        assert_eq!((allow.key.application.as_str(), allow.key.id.as_str(), allow.plan), ("web", "k1", "gold"));
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let table = table();
        let cases = [
            ("r9", Some("good"), Denial::UnknownApi),
            ("r2", Some("good"), Denial::UnknownApi),
            ("r1", None, Denial::MissingKey),
            ("r1", Some(""), Denial::MissingKey),
            ("r1", Some("wrong"), Denial::InvalidKey),
            ("r3", Some("good"), Denial::InvalidKey),
            ("r1", Some("old"), Denial::ExpiredKey),
            ("r1", Some("lone"), Denial::NotSubscribed),
            ("r1", Some("blocked"), Denial::SubscriptionBlocked),
        ];
        for (route, key, denial) in cases {
            assert_eq!(decide(&table, route, header(key), "/orders", 100).unwrap_err(), denial, "{route} {key:?}");
        }
    }

    #[test]
    fn a_key_in_the_query_is_read_url_decoded() {
        let mut table = table();
        table.keys.insert(
            digest("a b&c"),
            crate::table::Key { project: "shop".into(), application: "web".into(), id: "k5".into(), expires: 0 },
        );
        let allow = decide(&table, "r1", header(None), "/orders?x=1&apikey=a+b%26c", 0).unwrap();
        assert_eq!(allow.key.id, "k5");
    }

    #[test]
    fn the_key_parameter_is_taken_off_the_path_and_the_rest_kept_as_written() {
        assert_eq!(without_query("/o?a=%20&apikey=s&b=2", "apikey"), "/o?a=%20&b=2");
        assert_eq!(without_query("/o?apikey=s", "apikey"), "/o");
        assert_eq!(without_query("/o?api%6Bey=s&apikey=t", "apikey"), "/o");
        assert_eq!(without_query("/o", "apikey"), "/o");
    }

    #[test]
    fn a_table_with_unknown_fields_is_refused() {
        assert!(Table::parse(br#"{"route": {}}"#).is_err());
        assert!(Table::parse(b"{}").unwrap().routes.is_empty());
    }

    #[test]
    fn denials_read_as_json() {
        assert_eq!(Denial::MissingKey.body(), r#"{"error":"missing API key"}"#);
        assert!(Denial::ALL.iter().all(|d| [401, 403].contains(&d.status())));
    }
}
