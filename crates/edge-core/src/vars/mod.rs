//! Variables and templates, compiled once (nginx's `ngx_http_script` model): a string
//! such as `"$scheme://$host$request_uri"` becomes a [`Template`] of literal parts and
//! [`Var`] references when the config is loaded, and is rendered per request against a
//! [`Ctx`] (the request, the connection's facts, regex captures, the `[[map]]`s).
//!
//! How it fits: this module sits below `config` (which compiles every template at `-t`,
//! so an unknown variable is a `file:line` error), `state` (which keeps the compiled
//! templates in routes) and the handlers (which render them). It knows nothing of
//! sockets: the handlers fill a [`Ctx`] from the connection and the exchange.
//!
//! # API for the layers built on it
//! - [`Known`]: the variable names a config defines besides the built-ins (`[[map]]`
//!   and `[[geo]]` variables, named captures of its regexes). `config::validate::known(cfg)` builds it.
//! - [`Template::compile`]`(src, &known)`: parse once; an unknown variable is
//!   [`TemplateError::Unknown`] (`unknown variable "$request_url"`).
//! - [`Template::render`]`(&ctx, &mut Vec<u8>)` / [`Template::render_string`]: evaluate.
//!   A template without variables renders as a copy of its literal (no lookup).
//! - [`Var`]: one variable, resolved by [`Var::resolve`]; [`Var::write`] appends its value.
//!   Log-time variables (`$status`, `$time_iso8601`, `$time_local`,
//!   `$upstream_cache_status`, `$body_bytes_sent`, `$bytes_sent`, `$request_length`,
//!   `$request_time`, `$upstream_response_time`) read [`Ctx::log`] ([`LogFacts`]), empty
//!   when absent. [`Var::is_found`] tells an empty value from none (an access log
//!   writes `-` for none).
//! - [`NameTable`]: exact / `*.lead` / `trail.*` / `~regex` matching in nginx's order,
//!   shared by server names and `[[map]]` entries.
//! - [`normalize_uri`]: nginx's `$uri` (decoded, dots resolved, slashes merged), which
//!   locations match; routing keeps it in [`Routed::uri`] when it differs from the path.
//! - [`Captures`]: the captures of the server-name regex and of the latest location or
//!   rewrite regex (`$1`..`$9` from the latest, `$name` from either).
//!
//! # Cost
//! Nothing is looked up by name at request time. Built-in variables read the request
//! head in place; `$host` lower-cases while it writes. A `[[geo]]` variable of the
//! client address is a table lookup (tens of ns). Only `[[map]]` variables (which
//! render their source into a buffer), `[[geo]]` variables with another source (the
//! same) and regex matches with capture groups (which copy the subject) allocate.

mod ctx;
mod geo;
mod map;
mod names;
pub mod regex_index;
mod template;
mod uri;
mod var;

pub use ctx::{normalize_host, Captures, Client, Ctx, LogFacts, MapValues, Routed};
pub use geo::Geo;
pub use map::{Map, Maps};
pub use names::{compile_regex, NameMap, NamePattern, NameTable};
pub use template::{Piece, Template, TemplateError};
pub use uri::{normal_path_len, normalize_uri, UriError};
pub use var::{Known, Var};

#[cfg(test)]
mod tests;
