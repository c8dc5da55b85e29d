//! CPU sets and pinning: `--cpus SERVER:CLIENT`.
//!
//! How it fits: the runner pins the server under test to one set of CPUs and the load
//! generator to another, so they never steal each other's cycles; the origin gets a third
//! CPU when the machine has one and shares the client's otherwise. Pinning happens in
//! the child between fork and exec ([`CpuSet::pin_current`]), so every thread and every
//! process a server forks inherits the mask.

use std::fmt;

/// Highest CPU number accepted (the size of `cpu_set_t`).
pub const MAX_CPU: usize = 1023;

/// A set of CPU numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSet(pub Vec<usize>);

impl CpuSet {
    /// Parses "0", "0-3", "0,2,4-5".
    pub fn parse(s: &str) -> Result<CpuSet, String> {
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: usize = a
                .trim()
                .parse()
                .map_err(|_| format!("bad CPU list {s:?}"))?;
            let b: usize = b
                .trim()
                .parse()
                .map_err(|_| format!("bad CPU list {s:?}"))?;
            if a > b || b > MAX_CPU {
                return Err(format!("bad CPU range {part:?} in {s:?}"));
            }
            cpus.extend(a..=b);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuSet(cpus))
    }

    /// The kernel mask for this set.
    fn mask(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.0 {
            // SAFETY: c <= MAX_CPU < CPU_SETSIZE (1024), checked in `parse`/`allowed`.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    }

    /// A closure for `CommandExt::pre_exec` that pins the child to this set. The mask is
    /// built here, before fork, so the closure only makes one syscall (async-signal-safe).
    pub fn pin_current(&self) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
        let set = self.mask();
        move || {
            // SAFETY: `set` is a fully initialised cpu_set_t owned by the closure and the
            // size passed is its exact size; pid 0 means the calling process (the child).
            let rc =
                unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s: Vec<String> = self.0.iter().map(|c| c.to_string()).collect();
        f.write_str(&s.join(","))
    }
}

/// The CPUs this process may run on (its own affinity mask).
pub fn allowed() -> Vec<usize> {
    // SAFETY: zeroed cpu_set_t is valid; sched_getaffinity writes at most size_of bytes.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pid 0 is this process.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        return (0..n).collect();
    }
    // SAFETY: reading bits of an initialised set, index < CPU_SETSIZE.
    (0..=MAX_CPU)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The default `--cpus`: the first two allowed CPUs, or the only one (shared, with a
/// warning from [`Placement::parse`]) on a single-CPU machine.
pub fn default_spec(allowed: &[usize]) -> String {
    match allowed {
        [] => "0:0".into(),
        [only] => format!("{only}:{only}"),
        [a, b, ..] => format!("{a}:{b}"),
    }
}

/// Where each process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub server: CpuSet,
    pub client: CpuSet,
    pub origin: CpuSet,
}

impl Placement {
    /// Parses `SERVER:CLIENT` against the CPUs in `allowed`. The origin takes the first
    /// allowed CPU used by neither side, or shares the client's.
    pub fn parse(spec: &str, allowed: &[usize]) -> Result<Placement, String> {
        let (s, c) = spec
            .split_once(':')
            .ok_or_else(|| format!("--cpus {spec:?}: expected SERVER:CLIENT, e.g. 0:1"))?;
        let server = CpuSet::parse(s)?;
        let client = CpuSet::parse(c)?;
        for cpu in server.0.iter().chain(&client.0) {
            if !allowed.contains(cpu) {
                return Err(format!(
                    "--cpus {spec:?}: CPU {cpu} is not available (allowed: {allowed:?})"
                ));
            }
        }
        if server.0.iter().any(|c| client.0.contains(c)) {
            eprintln!("edgebench: warning: --cpus {spec}: server and client share a CPU; results will mix their costs");
        }
        let origin = match allowed
            .iter()
            .find(|c| !server.0.contains(c) && !client.0.contains(c))
        {
            Some(&c) => CpuSet(vec![c]),
            None => client.clone(),
        };
        Ok(Placement {
            server,
            client,
            origin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(CpuSet::parse("0").unwrap().0, vec![0]);
        assert_eq!(CpuSet::parse("0-2,5,1").unwrap().0, vec![0, 1, 2, 5]);
        for bad in ["", "a", "3-1", "0-2000", "1,,2"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placement_picks_a_third_cpu_for_the_origin_when_there_is_one() {
        let p = Placement::parse("0:1", &[0, 1, 2, 3]).unwrap();
        assert_eq!(
            (p.server.0, p.client.0, p.origin.0),
            (vec![0], vec![1], vec![2])
        );
        let p = Placement::parse("0:1", &[0, 1]).unwrap();
        assert_eq!(p.origin.0, vec![1]);
        assert!(Placement::parse("0:7", &[0, 1])
            .unwrap_err()
            .contains("CPU 7"));
        assert!(Placement::parse("01", &[0, 1])
            .unwrap_err()
            .contains("SERVER:CLIENT"));
    }

    #[test]
    fn default_uses_the_allowed_cpus() {
        assert_eq!(default_spec(&[0, 1, 2]), "0:1");
        assert_eq!(default_spec(&[4, 7]), "4:7");
        assert_eq!(default_spec(&[3]), "3:3");
    }

    /// The pre_exec closure really pins the child: it reads its own allowed list.
    #[test]
    fn pinning_applies_to_the_child() {
        let cpu = *allowed().last().unwrap();
        let set = CpuSet(vec![cpu]);
        let mut cmd = std::process::Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        // SAFETY: the closure only calls sched_setaffinity (async-signal-safe).
        unsafe { cmd.pre_exec(set.pin_current()) };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split(':').nth(1).unwrap().trim(),
            cpu.to_string(),
            "{text}"
        );
    }
}
