//! The HTTP/1.1 connection layer, below the handlers: a client [`conn::Conn`] (socket
//! plus read buffer, per-operation timeouts), one request/response [`exchange::Exchange`]
//! with its version-neutral response head ([`head`]; HTTP/2 streams in [`h2`], HTTP/3
//! ones in [`h3`]),
//! the [`session`] loop that reads heads and calls a [`session::Service`] for each, the
//! small complete responses every handler sends ([`respond`]) and file bodies sent to the
//! socket ([`send`], and large ones written from a mapping of the file, [`mapped`]).
//!
//! Nothing here names a worker, a route or a handler: the layer above implements
//! [`session::Service`] and passes what a call needs as arguments.

pub mod client_addr;
pub mod conn;
pub mod exchange;
pub mod fields;
pub mod h2;
pub mod h2stream;
pub mod h3;
pub mod h3fields;
pub mod h3stream;
pub mod head;
pub mod idle;
pub mod large_send;
pub mod mapped;
pub mod node;
pub mod respond;
pub mod send;
pub mod session;

pub use conn::{Conn, ConnInfo};
pub use exchange::{Exchange, ExchangeError};

use std::time::Duration;

/// The client-side timeouts (nginx's names), applied per operation.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub client_header: Duration,
    pub client_body: Duration,
    pub send: Duration,
    pub keepalive: Duration,
}
