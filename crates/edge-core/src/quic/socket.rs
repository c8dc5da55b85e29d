//! A worker's UDP socket as quinn sees it ([`WorkerUdp`]), with the hand-off of
//! datagrams between workers ([`Handoff`]).
//!
//! Every worker binds its own socket on the listener's address (SO_REUSEPORT); the
//! kernel picks one by the hash of the 4-tuple. A client whose address changes (NAT
//! rebinding, Wi-Fi to cellular) is hashed anew and usually lands on another worker,
//! whose quinn endpoint does not know the connection and would answer with a stateless
//! reset. So every datagram is looked at before quinn sees it: one whose destination
//! CID names another worker ([`super::cid`]) is copied into that worker's bounded
//! queue, which wakes it; its quinn then reads it like one from its own socket (with
//! the address it came from and the local address it was sent to) and answers through
//! its own socket, which has the same local address and port, so the client sees no
//! change. A full queue drops the datagram (QUIC recovers from loss); both outcomes are
//! counted. Datagrams quinn-udp received coalesced (GRO) come from one 4-tuple and are
//! steered together by the first.

use super::cid::Layout;
use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Datagrams a worker's hand-off queue holds (a migration burst; about 1.5 MB at
/// most per worker and listener).
const QUEUE: usize = 1024;

/// One datagram (or a GRO run of them) on its way to its worker.
struct Datagram {
    data: Vec<u8>,
    addr: SocketAddr,
    stride: usize,
    ecn: Option<EcnCodepoint>,
    dst_ip: Option<IpAddr>,
}

/// A worker's hand-off queue: filled by other workers, read by its own socket.
struct Queue {
    q: crossbeam_queue::ArrayQueue<Datagram>,
    waker: Mutex<Option<Waker>>,
}

/// The hand-off queues of one listener's workers.
pub struct Handoff {
    queues: Vec<Queue>,
}

impl Handoff {
    pub fn new(workers: usize) -> Arc<Handoff> {
        Arc::new(Handoff {
            queues: (0..workers.max(1))
                .map(|_| Queue {
                    q: crossbeam_queue::ArrayQueue::new(QUEUE),
                    waker: Mutex::new(None),
                })
                .collect(),
        })
    }

    /// Queues `d` for worker `to` and wakes it; false if its queue is full.
    fn forward(&self, to: usize, d: Datagram) -> bool {
        let Some(q) = self.queues.get(to) else {
            return false;
        };
        if q.q.push(d).is_err() {
            return false;
        }
        let waker = q.waker.lock().ok().and_then(|mut w| w.take());
        if let Some(w) = waker {
            w.wake();
        }
        true
    }
}

/// A worker's socket: quinn's own (recvmmsg, GRO, GSO, ECN, from quinn-udp) plus the
/// worker's hand-off queue, and the steering of what it receives.
pub struct WorkerUdp {
    inner: Arc<dyn AsyncUdpSocket>,
    me: usize,
    layout: Layout,
    handoff: Arc<Handoff>,
    metrics: Arc<crate::metrics::Metrics>,
    /// `quic_gso`: batched sends where the kernel has them.
    gso: bool,
}

impl fmt::Debug for WorkerUdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerUdp")
            .field("worker", &self.me)
            .finish()
    }
}

impl WorkerUdp {
    /// Worker `me`'s socket over quinn's `inner` (made on the worker's runtime);
    /// `gso`: send runs of datagrams in one call where the kernel can.
    pub fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        me: usize,
        layout: Layout,
        handoff: Arc<Handoff>,
        metrics: Arc<crate::metrics::Metrics>,
        gso: bool,
    ) -> WorkerUdp {
        WorkerUdp {
            inner,
            me,
            layout,
            handoff,
            metrics,
            gso,
        }
    }

    fn stats(&self) -> Option<&crate::metrics::QuicStats> {
        self.metrics.workers.get(self.me).map(|w| &w.quic)
    }

    /// Moves datagrams from the hand-off queue into quinn's buffers; how many.
    fn take_handed(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> usize {
        let Some(q) = self.handoff.queues.get(self.me) else {
            return 0;
        };
        let mut n = 0;
        while n < bufs.len().min(meta.len()) {
            let Some(d) = q.q.pop() else {
                break;
            };
            if d.data.len() > bufs[n].len() {
                continue; // cannot happen: every worker reads into buffers of one size
            }
            bufs[n][..d.data.len()].copy_from_slice(&d.data);
            meta[n] = RecvMeta {
                addr: d.addr,
                len: d.data.len(),
                stride: d.stride,
                ecn: d.ecn,
                dst_ip: d.dst_ip,
            };
            n += 1;
        }
        n
    }

    /// Hands the received datagrams that belong to other workers over; their entries
    /// are left empty (quinn skips a zero-length entry). Whether any stays here.
    fn steer(&self, n: usize, bufs: &[IoSliceMut<'_>], meta: &mut [RecvMeta]) -> bool {
        let mut kept = false;
        for (m, b) in meta.iter_mut().zip(bufs).take(n) {
            let data = &b[..m.len.min(b.len())];
            let first = match m.stride {
                0 => data,
                s => &data[..s.min(data.len())],
            };
            match self.layout.steer(first) {
                Some(to) if to != self.me => {
                    let d = Datagram {
                        data: data.to_vec(),
                        addr: m.addr,
                        stride: m.stride,
                        ecn: m.ecn,
                        dst_ip: m.dst_ip,
                    };
                    let ok = self.handoff.forward(to, d);
                    if let Some(s) = self.stats() {
                        if ok {
                            s.handoff_forwarded.fetch_add(1, Relaxed);
                        } else {
                            s.handoff_dropped.fetch_add(1, Relaxed);
                        }
                    }
                    m.len = 0;
                }
                _ => kept = true,
            }
        }
        kept
    }
}

impl AsyncUdpSocket for WorkerUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            let n = self.take_handed(bufs, meta);
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            match self.inner.poll_recv(cx, bufs, meta) {
                Poll::Ready(Ok(n)) => {
                    if self.steer(n, bufs, meta) {
                        return Poll::Ready(Ok(n));
                    }
                    // All handed over: read on.
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Registered, then checked again: a datagram queued in between
                    // is not missed.
                    if let Some(q) = self.handoff.queues.get(self.me) {
                        if let Ok(mut w) = q.waker.lock() {
                            match &*w {
                                Some(old) if old.will_wake(cx.waker()) => {}
                                _ => *w = Some(cx.waker().clone()),
                            }
                        }
                        if !q.q.is_empty() {
                            continue;
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        if self.gso {
            self.inner.max_transmit_segments()
        } else {
            1
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Binds worker sockets for a QUIC listener: one UDP socket per worker on `addr`, with
/// SO_REUSEPORT (the kernel spreads clients by their 4-tuple), non-blocking.
pub fn bind_workers(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    (0..workers.max(1))
        .map(|_| {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            if addr.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.set_reuse_port(true)?;
            s.set_nonblocking(true)?;
            // Bursts of Initials and of a fast client's ACKs wait here, not in drops.
            let _ = s.set_recv_buffer_size(4 << 20);
            let _ = s.set_send_buffer_size(4 << 20);
            s.bind(&addr.into())?;
            Ok(s.into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(n: u8) -> Datagram {
        Datagram {
            data: vec![n; 10],
            addr: "127.0.0.1:9".parse().unwrap(),
            stride: 10,
            ecn: None,
            dst_ip: None,
        }
    }

    #[test]
    fn a_full_queue_drops_and_a_forward_wakes() {
        let h = Handoff::new(2);
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Relaxed);
            }
        }
        *h.queues[1].waker.lock().unwrap() = Some(Waker::from(Arc::new(Flag(woken.clone()))));
        assert!(h.forward(1, datagram(1)));
        assert!(woken.load(Relaxed));
        for i in 1..QUEUE {
            assert!(h.forward(1, datagram(i as u8)));
        }
        assert!(!h.forward(1, datagram(0)), "queue full");
        assert!(!h.forward(5, datagram(0)), "no such worker");
        assert_eq!(h.queues[1].q.len(), QUEUE);
    }

    #[test]
    fn workers_bind_one_port_each() {
        let socks = bind_workers("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let addr = socks[0].local_addr().unwrap();
        let more = bind_workers(addr, 3).unwrap();
        assert_eq!(more.len(), 3);
        for s in &more {
            assert_eq!(s.local_addr().unwrap(), addr);
        }
    }
}
