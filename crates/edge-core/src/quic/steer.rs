//! Steering in the kernel (`[[listen]] quic_bpf`, nginx's `quic_bpf`): a classic BPF
//! program attached to a listener's reuseport group (`SO_ATTACH_REUSEPORT_CBPF`) picks
//! the socket of the worker a datagram's destination CID names ([`super::cid`]), so a
//! client whose address changed is delivered straight to the worker that owns its
//! connection, with no copy and no wake-up of another worker.
//!
//! The kernel runs the program with the datagram's payload at offset 0 (past the UDP
//! header) and takes its result as an index into the group's sockets, which are in the
//! order they were bound: the main thread binds worker 0's first, then 1's, and so on
//! ([`super::socket::bind_workers`]). A result past the last socket (our "no opinion")
//! makes the kernel fall back to its 4-tuple hash, as without a program: a client's
//! first Initials, which carry a CID the client chose, go where they always went.
//!
//! Classic BPF needs no privilege (eBPF's `SO_ATTACH_REUSEPORT_EBPF` needs `CAP_BPF`),
//! and the program is the same decision as [`super::cid::Layout::steer`], instruction
//! for instruction (a test checks the two agree, by sending datagrams through the
//! kernel). The user-space hand-off ([`super::socket`]) stays underneath: were the
//! group's order ever to differ from the workers' (a socket of the group closed and
//! another moved into its slot), a datagram the kernel delivers to the wrong worker is
//! still handed to the right one.

use super::cid::{Layout, CID_LEN};
use std::io;
use std::os::fd::AsRawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` (Linux 4.5; the `libc` crate has no Linux name for it).
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 0x35;

// Classic BPF opcodes (linux/filter.h).
const LD_B_ABS: u16 = 0x30; // A = payload[k] (one byte)
const ALU_AND_K: u16 = 0x54; // A &= k
const ALU_XOR_K: u16 = 0xa4; // A ^= k
const JMP_JEQ_K: u16 = 0x15; // A == k ?
const JMP_JGE_K: u16 = 0x35; // A >= k ?
const JMP_JSET_K: u16 = 0x45; // A & k ?
const RET_A: u16 = 0x16;
const RET_K: u16 = 0x06;

/// What the program returns for "not ours": past any group's last socket.
const NO_OPINION: u32 = u32::MAX;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The steering program for `layout` (see the module doc). Jumps are relative: to
/// instruction `i + 1 + offset`.
pub fn program(layout: Layout) -> Vec<libc::sock_filter> {
    let secret = u32::from(layout.secret());
    let workers = layout.workers() as u32;
    let cid = CID_LEN as u32;
    vec![
        /* 0 */ op(LD_B_ABS, 0, 0, 0), // flags byte
        /* 1 */ op(JMP_JSET_K, 7, 0, 0x80), // long header: to 9
        // Short header: the CID follows the flags byte.
        /* 2 */
        op(LD_B_ABS, 0, 0, 1),
        /* 3 */ op(ALU_AND_K, 0, 0, 0xc0),
        /* 4 */ op(JMP_JEQ_K, 0, 13, 0x40), // not our layout: to 18
        /* 5 */ op(LD_B_ABS, 0, 0, 2),
        /* 6 */ op(ALU_XOR_K, 0, 0, secret),
        /* 7 */ op(JMP_JGE_K, 10, 0, workers), // no such worker: to 18
        /* 8 */ op(RET_A, 0, 0, 0),
        // Long header: flags, version (4), DCID length, DCID.
        /* 9 */
        op(LD_B_ABS, 0, 0, 5),
        /* 10 */ op(JMP_JEQ_K, 0, 7, cid), // another length: to 18
        /* 11 */ op(LD_B_ABS, 0, 0, 6),
        /* 12 */ op(ALU_AND_K, 0, 0, 0xc0),
        /* 13 */ op(JMP_JEQ_K, 0, 4, 0x40), // to 18
        /* 14 */ op(LD_B_ABS, 0, 0, 7),
        /* 15 */ op(ALU_XOR_K, 0, 0, secret),
        /* 16 */ op(JMP_JGE_K, 1, 0, workers), // to 18
        /* 17 */ op(RET_A, 0, 0, 0),
        /* 18 */ op(RET_K, 0, 0, NO_OPINION),
    ]
}

/// Attaches the steering program to the reuseport group of `sock` (one socket of it
/// stands for the group). Fails where the kernel has no reuseport BPF.
pub fn attach(sock: &std::net::UdpSocket, layout: Layout) -> io::Result<()> {
    let mut prog = program(layout);
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call (the kernel copies the
    // program during setsockopt); the option length is the size of the `sock_fprog`
    // passed, and the descriptor is a valid socket owned by `sock` for the call.
    // Exercised by `tests::the_kernel_steers_each_datagram_to_the_worker_its_cid_names`.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    /// Runs the program on `d` the way the kernel does (a load past the end ends the
    /// program with 0).
    fn run(prog: &[libc::sock_filter], d: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0;
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_B_ABS => match d.get(i.k as usize) {
                    Some(b) => a = u32::from(*b),
                    None => return 0,
                },
                ALU_AND_K => a &= i.k,
                ALU_XOR_K => a ^= i.k,
                JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JMP_JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                JMP_JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                RET_A => return a,
                RET_K => return i.k,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    fn datagrams(layout: Layout, worker: usize) -> Vec<Vec<u8>> {
        let cid = layout.cid_for(worker, [0x33; CID_LEN]);
        let mut short = vec![0x41];
        short.extend_from_slice(&cid);
        short.extend_from_slice(&[7; 30]);
        let mut long = vec![0xc3, 0, 0, 0, 1, CID_LEN as u8];
        long.extend_from_slice(&cid);
        long.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0]);
        vec![short, long]
    }

    #[test]
    fn the_program_agrees_with_the_layout() {
        for (workers, secret) in [(1, 0), (2, 0x5a), (16, 0xff), (256, 7)] {
            let layout = Layout::with_secret(workers, secret);
            let prog = program(layout);
            for w in [0, workers / 2, workers - 1] {
                for d in datagrams(layout, w) {
                    assert_eq!(run(&prog, &d), w as u32);
                    assert_eq!(layout.steer(&d), Some(w));
                }
            }
            // Not ours: a client's Initial (8-byte CID), another layout, a worker
            // byte past the count, a short garbage datagram.
            let initial = [0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
            assert_eq!(run(&prog, &initial), NO_OPINION);
            let mut other = datagrams(layout, 0)[0].clone();
            other[1] = 0x80;
            assert_eq!(run(&prog, &other), NO_OPINION);
            assert_eq!(layout.steer(&other), None);
            if workers < 256 {
                let mut past = datagrams(layout, 0)[0].clone();
                past[2] = (workers as u8) ^ secret;
                assert_eq!(run(&prog, &past), NO_OPINION);
                assert_eq!(layout.steer(&past), None);
            }
        }
    }

    /// Through the kernel: a reuseport group of 2 sockets with the program attached;
    /// datagrams whose CID names worker 0 or 1 sent from many source ports (so the
    /// 4-tuple hash alone would split each set between the sockets) all reach the
    /// named socket.
    #[test]
    fn the_kernel_steers_each_datagram_to_the_worker_its_cid_names() {
        let first = super::super::socket::bind_workers("127.0.0.1:0".parse().unwrap(), 1)
            .unwrap()
            .remove(0);
        let addr = first.local_addr().unwrap();
        drop(first);
        let socks = super::super::socket::bind_workers(addr, 2).unwrap();
        let layout = Layout::with_secret(2, 0x9c);
        attach(&socks[0], layout).expect("SO_ATTACH_REUSEPORT_CBPF (Linux 4.5)");
        for s in &socks {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
        }
        for worker in [0usize, 1] {
            for _ in 0..16 {
                // A new source port each time.
                let client = UdpSocket::bind("127.0.0.1:0").unwrap();
                for d in datagrams(layout, worker) {
                    client.send_to(&d, addr).unwrap();
                    let mut buf = [0u8; 128];
                    let (n, _) = socks[worker]
                        .recv_from(&mut buf)
                        .expect("at the named worker");
                    assert_eq!(&buf[..n], &d[..]);
                }
            }
        }
        // Nothing went to the other socket.
        for s in &socks {
            s.set_nonblocking(true).unwrap();
            assert!(s.recv_from(&mut [0u8; 128]).is_err());
        }
    }
}
