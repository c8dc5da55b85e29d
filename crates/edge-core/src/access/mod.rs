//! Who may come in, by address: prefixes ([`cidr`]), the longest-prefix-match table
//! ([`ranges`]), `allow`/`deny` lists ([`rules`]) and `[[geo]]` tables ([`geo`]).
//!
//! How it fits: a leaf below `config` (which parses and checks these at `-t`), `vars`
//! (geo variables) and `state` (each route's compiled list). It names nothing else in
//! the crate.

pub mod cidr;
pub mod geo;
pub mod ranges;
pub mod rules;
