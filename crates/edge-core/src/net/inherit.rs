//! Listening sockets handed over from another process: a binary upgrade (the old
//! edgecache passes its sockets to the new one, nginx's USR2 model) or systemd socket
//! activation. A socket taken over keeps its accept queue, so no connection that the
//! kernel accepted is lost in the hand-over.
//!
//! How it fits: at start the server calls [`load_from_env`] once (before any thread
//! exists): it reads `EDGECACHE_INHERIT_FDS` (a comma list of descriptor numbers, set by
//! the old process) or systemd's `LISTEN_PID`/`LISTEN_FDS` (descriptors 3..3+N), notes
//! each socket's address, marks it close-on-exec again and clears the variables.
//! [`crate::net::bind_listener`] then takes a socket of the wanted address from here
//! before it binds a new one. Every listener the server uses is also remembered
//! ([`remember`]), so that a later upgrade can pass them all on ([`passable`]).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The variable an upgrading edgecache sets for its successor.
pub const INHERIT_ENV: &str = "EDGECACHE_INHERIT_FDS";

static INHERITED: Mutex<Vec<(SocketAddr, OwnedFd)>> = Mutex::new(Vec::new());
/// Duplicates of every listener in use, kept for a binary upgrade; None until
/// [`enable_remember`] (tests that bind sockets do not collect descriptors).
static REMEMBERED: Mutex<Option<Vec<OwnedFd>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes the sockets handed over through the environment. Returns what to log (one
/// line per socket taken, or why one was ignored). Call once, at start, before any
/// thread is started (it edits the environment).
pub fn load_from_env() -> Vec<String> {
    let mut log = Vec::new();
    let mut fds: Vec<RawFd> = Vec::new();
    if let Ok(list) = std::env::var(INHERIT_ENV) {
        for part in list.split(',').filter(|p| !p.is_empty()) {
            match part.trim().parse::<RawFd>() {
                Ok(fd) if fd > 2 => fds.push(fd),
                _ => log.push(format!("{INHERIT_ENV}: ignoring {part:?}")),
            }
        }
    }
    let systemd = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    if systemd {
        let n = std::env::var("LISTEN_FDS")
            .ok()
            .and_then(|n| n.parse::<RawFd>().ok())
            .unwrap_or(0);
        fds.extend((0..n.clamp(0, 1024)).map(|i| 3 + i));
    }
    // SAFETY: called at start, before the server starts any thread (nothing reads the
    // environment concurrently); the variables only describe descriptors to take.
    unsafe {
        std::env::remove_var(INHERIT_ENV);
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    let mut got = lock(&INHERITED);
    for fd in fds {
        if !is_listening_tcp(fd) {
            log.push(format!(
                "inherited descriptor {fd} is not a listening TCP socket: ignored"
            ));
            continue;
        }
        // SAFETY: the descriptor was handed to this process to own (the old process or
        // systemd set the variable for us), is open (checked just above), and nothing
        // else in this process owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        set_cloexec(&owned);
        let l = TcpListener::from(owned);
        match l.local_addr() {
            Ok(addr) => {
                log.push(format!(
                    "took over the listening socket {addr} (descriptor {fd})"
                ));
                got.push((addr, OwnedFd::from(l)));
            }
            Err(e) => log.push(format!("inherited descriptor {fd}: getsockname: {e}")),
        }
    }
    log
}

/// An inherited socket bound to `addr`, if one is left.
pub fn take(addr: SocketAddr) -> Option<TcpListener> {
    let mut got = lock(&INHERITED);
    let i = got.iter().position(|(a, _)| *a == addr)?;
    Some(TcpListener::from(got.swap_remove(i).1))
}

/// The inherited sockets nobody asked for (the old process had more per address: more
/// workers), with their addresses.
pub fn rest() -> Vec<(SocketAddr, TcpListener)> {
    lock(&INHERITED)
        .drain(..)
        .map(|(a, fd)| (a, TcpListener::from(fd)))
        .collect()
}

/// From now on, every listener passed to [`remember`] is kept (duplicated) for an
/// upgrade.
pub fn enable_remember() {
    let mut r = lock(&REMEMBERED);
    if r.is_none() {
        *r = Some(Vec::new());
    }
}

/// Keeps a duplicate of `l` for a later upgrade (when enabled).
pub fn remember(l: &TcpListener) {
    if let Some(list) = lock(&REMEMBERED).as_mut() {
        if let Ok(dup) = l.try_clone() {
            list.push(OwnedFd::from(dup));
        }
    }
}

/// The descriptors of every listener in use, for the successor of a binary upgrade
/// (they stay open while this process lives).
pub fn passable() -> Vec<RawFd> {
    lock(&REMEMBERED)
        .as_ref()
        .map(|l| l.iter().map(AsRawFd::as_raw_fd).collect())
        .unwrap_or_default()
}

fn is_listening_tcp(fd: RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given; a bad descriptor
    // makes getsockopt fail (EBADF/ENOTSOCK), which is the answer "no".
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    } == 0;
    let mut ty: libc::c_int = 0;
    let mut tlen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: as above.
    let stream = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut tlen,
        )
    } == 0
        && ty == libc::SOCK_STREAM;
    ok && v != 0 && stream
}

fn set_cloexec(fd: &OwnedFd) {
    // SAFETY: F_GETFD/F_SETFD on a descriptor this process owns; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// Clears close-on-exec on `fds` in a child between fork and exec, so the new program
/// inherits them. Only async-signal-safe calls (fcntl).
///
/// # Safety
/// To be called only in a forked child before exec (`CommandExt::pre_exec`), on
/// descriptors open in that child.
pub unsafe fn keep_across_exec(fds: &[RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: the caller guarantees we run in the child before exec; fcntl is
        // async-signal-safe and takes no memory.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_recognised_and_others_are_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(is_listening_tcp(l.as_raw_fd()));
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(!is_listening_tcp(c.as_raw_fd()), "a connected socket");
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(!is_listening_tcp(f.as_raw_fd()), "a file");
        assert!(!is_listening_tcp(-1));
    }

    #[test]
    fn take_by_address_then_the_rest() {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        lock(&INHERITED).push((aa, OwnedFd::from(a)));
        lock(&INHERITED).push((ba, OwnedFd::from(b)));
        let got = take(aa).expect("a");
        assert_eq!(got.local_addr().unwrap(), aa);
        assert!(take(aa).is_none(), "taken once");
        let rest = rest();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0, ba);
    }
}
