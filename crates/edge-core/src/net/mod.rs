//! Listening sockets and accept strategies (levers 3 and 4 of docs/background.md).
//!
//! How it fits: the server asks an [`AcceptStrategy`] (chosen once from `accept = ...`)
//! to bind every `[[listen]]` address for N workers *before* any worker starts, so a bind
//! error stops the process early with a clear message. Each worker then receives a
//! [`WorkerAcceptor`]: sockets to poll in its own reactor, or a channel fed by accept
//! threads. The worker's accept loop never knows which strategy made them.

pub mod accept;
pub mod inherit;
pub mod ktls;
pub mod listener;
pub mod proxy_protocol;
pub mod sock;
pub mod sys;

pub use accept::{strategy_for, AcceptPlan, AcceptStrategy, Accepted, WorkerAcceptor};
pub use listener::{bind_listener, Blocking, ListenSpec, PortSharing};
pub use sock::Sock;

/// Implements tokio's `AsyncRead` and `AsyncWrite` for an enum whose variants each hold
/// a stream (a socket, a boxed TLS stream, ...), by passing every call to the variant's
/// stream: `delegate_async_io!(ClientIo { Tcp, Tls, H2 });`.
macro_rules! delegate_async_io {
    ($ty:ident { $($v:ident),+ }) => {
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$v(s) => std::pin::Pin::new(s).poll_read(cx, buf),)+
                }
            }
        }

        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$v(s) => std::pin::Pin::new(s).poll_write(cx, buf),)+
                }
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$v(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),)+
                }
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$v(s) => std::pin::Pin::new(s).poll_flush(cx),)+
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($ty::$v(s) => std::pin::Pin::new(s).poll_shutdown(cx),)+
                }
            }
        }
    };
}
pub(crate) use delegate_async_io;

/// Implements tokio's `AsyncWrite` for a struct by passing every call to one of its
/// fields: `delegate_async_write!(TlsIo, tcp);`.
macro_rules! delegate_async_write {
    ($ty:ident, $field:ident) => {
        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().$field).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().$field).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().$field).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().$field).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use delegate_async_write;
