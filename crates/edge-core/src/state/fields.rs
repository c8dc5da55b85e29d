//! A location's header control, compiled once ([`RouteFields`]): `proxy_set_header`
//! (request fields to the upstream), `proxy_hide_header`, `add_header` (+
//! `add_header_always`) and `cache_status_header` (response fields to the client). The
//! handlers render the templates per request (`handlers::context::apply_fields`); the
//! serde config is not read again.

use super::error::StateError;
use crate::config::validate::BadValue;
use crate::config::Location;
use crate::vars::{Known, Template};
use std::sync::Arc;

/// One `proxy_set_header` entry.
pub struct SetField {
    /// As configured (the case sent upstream).
    pub name: Box<str>,
    /// None: the field is removed (an empty value).
    pub value: Option<Template>,
}

pub struct RouteFields {
    /// `proxy_set_header` without Host, in name order.
    pub set: Vec<SetField>,
    /// `proxy_set_header` Host.
    pub set_host: Option<Template>,
    /// Lowercase names of every `proxy_set_header` entry (Host included).
    pub set_names: Arc<[Box<str>]>,
    /// `proxy_hide_header`, lowercase; None when empty.
    pub hide: Option<Arc<[Box<str>]>>,
    /// `add_header` with templates; empty when [`Self::add_static`] holds them all.
    pub add: Vec<(Box<str>, Template)>,
    /// `add_header` pre-serialised, when no value has a variable.
    pub add_static: Option<bytes::Bytes>,
    pub add_always: bool,
    pub cache_status: bool,
}

fn template(src: &str, known: &Known) -> Result<Template, StateError> {
    Template::compile(src, known).map_err(|e| StateError::BadValue(BadValue(e.to_string())))
}

impl RouteFields {
    pub fn compile(loc: &Location, known: &Known) -> Result<RouteFields, StateError> {
        let mut set = Vec::new();
        let mut set_host = None;
        let mut names = Vec::new();
        if let Some(s) = &loc.proxy_set_header {
            for (n, v) in s.get_ref() {
                names.push(n.to_ascii_lowercase().into_boxed_str());
                let value = if v.is_empty() {
                    None
                } else {
                    Some(template(v, known)?)
                };
                if n.eq_ignore_ascii_case("host") {
                    set_host = value;
                } else {
                    set.push(SetField {
                        name: n.as_str().into(),
                        value,
                    });
                }
            }
        }
        let hide = loc
            .proxy_hide_header
            .as_ref()
            .map(|h| {
                h.get_ref()
                    .iter()
                    .map(|n| n.to_ascii_lowercase().into_boxed_str())
                    .collect::<Arc<[Box<str>]>>()
            })
            .filter(|h| !h.is_empty());
        let mut add = Vec::new();
        for (n, v) in &loc.add_header {
            add.push((Box::<str>::from(n.as_str()), template(v, known)?));
        }
        let add_static = if add.iter().all(|(_, t)| t.as_literal().is_some()) && !add.is_empty() {
            let mut lines = Vec::new();
            for (n, t) in add.drain(..) {
                let v = t.as_literal().unwrap_or_default().to_string();
                edge_http::write_header(&mut lines, &n, v.as_bytes());
            }
            Some(bytes::Bytes::from(lines))
        } else {
            None
        };
        Ok(RouteFields {
            set,
            set_host,
            set_names: names.into(),
            hide,
            add,
            add_static,
            add_always: loc.add_header_always.unwrap_or(false),
            cache_status: loc.cache_status_header.unwrap_or(true),
        })
    }

    /// Whether the location sets any request field.
    pub fn sets_request(&self) -> bool {
        !self.set_names.is_empty()
    }

    /// Whether every response keeps the default head (nothing added or hidden, cache
    /// status sent).
    pub fn response_default(&self) -> bool {
        self.add.is_empty() && self.add_static.is_none() && self.hide.is_none() && self.cache_status
    }
}
