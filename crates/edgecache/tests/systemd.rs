//! systemd's readiness protocol (`Type=notify`, `NotifyAccess=all`, as the packaged unit
//! has it) across a binary upgrade. A unix datagram socket in a temp dir plays systemd:
//! edgecache gets it as `NOTIFY_SOCKET`, and every message is read with its sender's pid
//! (`SCM_CREDENTIALS`, which is how systemd tells who sent what).
//!
//! The story: the old process used to send `STOPPING=1` when it exited after handing its
//! sockets over. From any process of the unit that makes systemd stop the whole unit, the
//! new process included, so an upgrade under systemd took the service down.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

/// The fake systemd: a datagram socket that receives its senders' credentials.
struct Notify {
    sock: UnixDatagram,
    _dir: tempfile::TempDir,
    path: String,
}

impl Notify {
    fn bind() -> Notify {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        let on: libc::c_int = 1;
        // SAFETY: a valid socket, and `on` is a c_int that outlives the call.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_PASSCRED: {}", std::io::Error::last_os_error());
        Notify {
            sock,
            path: path.to_string_lossy().into_owned(),
            _dir: dir,
        }
    }

    /// The next message and its sender's pid; None when nothing came within `timeout`.
    fn recv(&self, timeout: Duration) -> Option<(String, i32)> {
        self.sock.set_read_timeout(Some(timeout)).unwrap();
        let mut buf = [0u8; 4096];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // u64s: aligned for the cmsghdr the kernel writes into it.
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data; all-zero is a valid empty value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, all alive and
        // writable for the call, with their true lengths.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => return None,
                _ => panic!("recvmsg: {e}"),
            }
        }
        assert_eq!(
            msg.msg_flags & libc::MSG_CTRUNC,
            0,
            "control data truncated"
        );
        let mut pid = None;
        // SAFETY: `msg` was filled by recvmsg; the CMSG_* walk stays within
        // `msg_controllen` bytes of `control`, and the data of an SCM_CREDENTIALS
        // message is a ucred (read unaligned, as CMSG_DATA promises no alignment).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                    let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    pid = Some(cred.pid);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
        Some((text, pid.expect("the sender's credentials")))
    }

    fn expect(&self, what: &str) -> (String, i32) {
        self.recv(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no sd_notify message: expected {what}"))
    }
}

fn pid_of(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Running (a zombie waiting for whoever adopted it to reap it has exited).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The new process is not our child (the old one started it): killed when the test
/// ends, however it ends.
struct Reap(i32);

impl Drop for Reap {
    fn drop(&mut self) {
        if alive(self.0) {
            // SAFETY: a pid this test's server started, still running.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

#[test]
fn a_binary_upgrade_keeps_the_unit_up_and_only_a_real_stop_says_stopping() {
    let sd = Notify::bind();
    let cfg = "workers = 1\nworker_cpu_affinity = \"off\"\npid = \"edgecache.pid\"\nshutdown_timeout = \"10s\"\n[[listen]]\naddr = \"{listen}\"\n[[location]]\nprefix = \"/\"\nreturn = { status = 200, body = \"up\" }\n";
    let (mut old, addr, _) = common::edgecache_env(cfg, &[("NOTIFY_SOCKET", &sd.path)]);
    let old_pid = old.child.id() as i32;
    let pid_file = old.dir().join("edgecache.pid");

    let first = sd.expect("the old process's READY=1");
    assert_eq!(first, (format!("READY=1\nMAINPID={old_pid}"), old_pid));

    old.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(20);
    let new_pid = loop {
        if let Some(p) = pid_of(&pid_file).filter(|&p| p != old_pid) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no new process; stderr:\n{}",
            old.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let _reap = Reap(new_pid);

    // The new process says it serves and is the main one, before the old one hears of it.
    let second = sd.expect("the new process's READY=1");
    assert_eq!(second, (format!("READY=1\nMAINPID={new_pid}"), new_pid));
    // The old one hands the unit over, and says nothing else while it drains and exits.
    let third = sd.expect("the old process's MAINPID=<new>");
    assert_eq!(third, (format!("MAINPID={new_pid}"), old_pid));
    assert_eq!(old.wait_exit(Duration::from_secs(15)), Some(0));
    assert_eq!(
        sd.recv(Duration::from_millis(300)),
        None,
        "nothing after the hand-over (STOPPING=1 would stop the unit)"
    );
    assert_eq!(edge_testkit::get(addr, "/", &[]).body, b"up");

    // A real stop of the new process says STOPPING=1, once.
    // SAFETY: the process this test's server started.
    assert_eq!(unsafe { libc::kill(new_pid, libc::SIGQUIT) }, 0);
    let last = sd.expect("the new process's STOPPING=1");
    assert_eq!(last, ("STOPPING=1".to_string(), new_pid));
    let deadline = Instant::now() + Duration::from_secs(15);
    while alive(new_pid) {
        assert!(Instant::now() < deadline, "the new process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sd.recv(Duration::from_millis(300)), None);
}
