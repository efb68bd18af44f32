//! An Envoy HTTP filter (proxy-wasm) that checks opaque API keys against their digests, so a request with
//! a key is decided inside the gateway: the same decisions as the enforcer, with no call out of Envoy.
//!
//! Allowed, the request goes on with the caller's application, plan and key id in the identity headers
//! (over anything the client sent) and without the key; refused, the gateway answers 401 / 403 with a JSON
//! reason. Each worker holds the table of its last configuration; an unreadable one is refused (NACKed),
//! and until the first arrives the table is empty, so every key is refused.

pub mod decision;
pub mod table;

use decision::{decide, without_query, Allow, Denial};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType};
use std::rc::Rc;
use std::time::UNIX_EPOCH;
use table::Table;

const APPLICATION_HEADER: &str = "x-meshplane-application";
const PLAN_HEADER: &str = "x-meshplane-plan";
const KEY_ID_HEADER: &str = "x-meshplane-key-id";

/// Counters, as `meshplane_keys_allowed` and `meshplane_keys_<denial>` in the gateway's stats.
#[derive(Clone, Copy, Default)]
struct Counters {
    allowed: u32,
    denied: [u32; Denial::ALL.len()],
}

impl Counters {
    fn define() -> Counters {
        let counter = |name: &str| hostcalls::define_metric(MetricType::Counter, &format!("meshplane_keys_{name}"));
        let mut counters = Counters { allowed: counter("allowed").unwrap_or(0), ..Counters::default() };
        for (slot, denial) in counters.denied.iter_mut().zip(Denial::ALL) {
            *slot = counter(denial.name()).unwrap_or(0);
        }
        counters
    }

    fn count(id: u32) {
        if id != 0 {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Keys { table: Rc::new(Table::default()), counters: Counters::default() })
    });
}}

struct Keys {
    table: Rc<Table>,
    counters: Counters,
}

impl Context for Keys {}

impl RootContext for Keys {
    fn on_vm_start(&mut self, _size: usize) -> bool {
        self.counters = Counters::define();
        true
    }

    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = self.get_plugin_configuration().unwrap_or_default();
        match Table::parse(&bytes) {
            Ok(table) => {
                self.table = Rc::new(table);
                true
            }
            Err(err) => {
                log::error!("keys table refused: {err}");
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Check { table: Rc::clone(&self.table), counters: self.counters }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Check {
    table: Rc<Table>,
    counters: Counters,
}

impl Context for Check {}

impl Check {
    fn route_name(&self) -> String {
        self.get_property(vec!["xds", "route_name"])
            .or_else(|| self.get_property(vec!["route_name"]))
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_default()
    }

    fn now(&self) -> u64 {
        self.get_current_time().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
    }

    fn let_in(&self, allow: &Allow, path: &str) {
        self.set_http_request_header(APPLICATION_HEADER, Some(&allow.key.application));
        self.set_http_request_header(PLAN_HEADER, Some(allow.plan));
        self.set_http_request_header(KEY_ID_HEADER, Some(&allow.key.id));
        if !allow.api.header.is_empty() {
            self.set_http_request_header(&allow.api.header, None);
        }
        if !allow.api.query.is_empty() && path.contains('?') {
            self.set_http_request_header(":path", Some(&without_query(path, &allow.api.query)));
        }
    }

    fn refuse(&self, denial: Denial) {
        let mut headers = vec![("content-type", "application/json")];
        if denial.status() == 401 {
            headers.push(("www-authenticate", "APIKey"));
        }
        self.send_http_response(denial.status(), headers, Some(denial.body().as_bytes()));
    }
}

impl HttpContext for Check {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let path = self.get_http_request_header(":path").unwrap_or_default();
        let route = self.route_name();
        let decision = decide(&self.table, &route, |name| self.get_http_request_header(name), &path, self.now());
        match decision {
            Ok(allow) => {
                Counters::count(self.counters.allowed);
                self.let_in(&allow, &path);
                Action::Continue
            }
            Err(denial) => {
                let index = Denial::ALL.iter().position(|d| *d == denial).unwrap_or(0);
                Counters::count(self.counters.denied[index]);
                self.refuse(denial);
                Action::Pause
            }
        }
    }
}
