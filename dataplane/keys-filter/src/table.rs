//! The filter's configuration: what the agent knows of APIs, keys and subscriptions, as lookup tables.
//! It arrives whole with every change (the plugin configuration) and is never changed in place.

use serde::Deserialize;
use std::collections::HashMap;

#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Api {
    pub project: String,
    pub name: String,
    /// Lower-case request header carrying the key; "" = keys are not read from headers.
    #[serde(default)]
    pub header: String,
    /// Query parameter carrying the key; "" = keys are not read from the query.
    #[serde(default)]
    pub query: String,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Key {
    pub project: String,
    pub application: String,
    pub id: String,
    /// Seconds since the epoch; 0 = never expires.
    #[serde(default)]
    pub expires: u64,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Subscription {
    pub plan: String,
    pub active: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// Route name -> the API ("project/name") whose keys it checks.
    #[serde(default)]
    pub routes: HashMap<String, String>,
    /// By "project/name".
    #[serde(default)]
    pub apis: HashMap<String, Api>,
    /// By the hex SHA-256 digest of the key: the key itself never reaches the gateway.
    #[serde(default)]
    pub keys: HashMap<String, Key>,
    /// By "project/application/api".
    #[serde(default)]
    pub subscriptions: HashMap<String, Subscription>,
}

impl Table {
    pub fn parse(bytes: &[u8]) -> Result<Table, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    pub fn subscription(&self, project: &str, application: &str, api: &str) -> Option<&Subscription> {
        self.subscriptions.get(&format!("{project}/{application}/{api}"))
    }
}
